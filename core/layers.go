package core

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// AllowLayers decides a request of cost n against several limits of one
// key at once, such as 10 per second and 1000 per hour: it is admitted only
// if every layer admits, and then consumes n from each; when any layer
// denies, none is consumed. All layers are decided in one script, in one
// round trip, atomically: their keys share the caller's hash tag, so this
// works on Redis Cluster too. Results are in the order of limits; Strictest
// picks the one to report.
//
// Layer i > 0 keeps its state apart from a plain Allow of the same key, so
// changing the number of layers does not mix their counters; layer 0 is
// the same state as Allow(ctx, key, limits[0]).
func (l *Limiter) AllowLayers(ctx context.Context, key string, limits []Limit, n int) ([]Result, error) {
	if l.rdb == nil {
		return nil, ErrNoClient
	}
	if key == "" {
		return nil, ErrEmptyKey
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: AllowLayers needs at least one Limit", ErrInvalidLimit)
	}
	keys := make([]string, len(limits))
	args := make([]any, 0, len(limits)*9)
	caps := make([]int, len(limits))
	for i, limit := range limits {
		p, err := limit.params()
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if n <= 0 || int64(n) > p.capacity {
			return nil, fmt.Errorf("%w: n = %d, want 1 <= n <= %d (the capacity of layer %d)", ErrInvalidCost, n, p.capacity, i)
		}
		keys[i] = layerKey(l.prefix, key, limit.Algorithm, i)
		caps[i] = int(p.capacity)
		la := scriptArgs(limit.Algorithm, p, n, true)
		args = append(args, int(limit.Algorithm), len(la), peekArg(limit.Algorithm))
		args = append(args, la...)
	}
	if !l.breaker.allow(time.Now()) {
		return l.layersFallback(ctx, keys, limits, n, ErrUnavailable)
	}
	v, err := l.do(ctx, func(ctx context.Context) (any, error) {
		return layersScript.Run(ctx, l.run, keys, args...).Result()
	})
	var out []Result
	if err == nil {
		out, err = parseLayers(v, caps)
	}
	l.breaker.record(ctx, err, time.Now())
	if err != nil {
		return l.layersFallback(ctx, keys, limits, n, err)
	}
	return out, nil
}

func parseLayers(v any, caps []int) ([]Result, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 1+5*len(caps) {
		return nil, fmt.Errorf("%w: want %d integers, got %T %v", ErrBadReply, 1+5*len(caps), v, v)
	}
	out := make([]Result, len(caps))
	for i := range caps {
		r, err := parseInts(vals[1+5*i:6+5*i], caps[i])
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func (l *Limiter) layersFallback(ctx context.Context, keys []string, limits []Limit, n int, err error) ([]Result, error) {
	if l.fallback == nil || !redisFault(ctx, err) {
		return nil, err
	}
	out := make([]Result, len(limits))
	now := time.Now()
	for i, limit := range limits {
		out[i] = l.fallback.allow(keys[i], limit, n, now)
	}
	return out, nil
}

// Strictest returns the result to report for a layered decision: the
// denying layer with the longest RetryAfter if any denies, else the layer
// with the least Remaining (the longest ResetAfter among equals), carrying
// the longest Delay of any layer, since a request leaves only when every
// layer lets it.
func Strictest(rs []Result) Result {
	var best Result
	var delay time.Duration
	for i, r := range rs {
		if r.Allowed {
			delay = max(delay, r.Delay)
		}
		switch {
		case i == 0:
			best = r
		case best.Allowed != r.Allowed:
			if !r.Allowed {
				best = r
			}
		case !r.Allowed:
			if r.RetryAfter > best.RetryAfter {
				best = r
			}
		case r.Remaining < best.Remaining || r.Remaining == best.Remaining && r.ResetAfter > best.ResetAfter:
			best = r
		}
	}
	if best.Allowed {
		best.Delay = delay
	}
	return best
}

func layerKey(prefix, key string, a Algorithm, layer int) string {
	k := redisKey(prefix, key, a)
	if layer == 0 {
		return k
	}
	return k + ":" + strconv.Itoa(layer)
}
