package core

import (
	"context"
	"fmt"
	"time"
)

// maxLayers bounds the Limits of one AllowLayers call, so that Reset can
// name every key a caller may have.
const maxLayers = 8

// AllowLayers decides a request of cost n against several Limits of one
// key at once, such as 10 per second and 1000 per hour: it is admitted only
// if every layer admits, and then takes n from each; when any layer denies,
// none is taken. All layers are decided in one script, in one round trip,
// atomically: their keys share the caller's hash tag, so this works on
// Redis Cluster too. Results are in the order of limits (at most 8); each
// says whether its layer admits, and Granted is n in all of them only when
// the request was admitted.
//
// Layer i > 0 keeps its state apart from a plain Allow of the same key, so
// changing the number of layers does not mix their counters; layer 0 is
// the same state as Allow(ctx, key, limits[0]).
func (l *Limiter) AllowLayers(ctx context.Context, key string, limits []Limit, n int) ([]Result, error) {
	return l.layers(ctx, key, limits, n, modeConsume)
}

// RefundLayers gives back n units taken by AllowLayers from every layer, as
// Refund does for one Limit.
func (l *Limiter) RefundLayers(ctx context.Context, key string, limits []Limit, n int) error {
	_, err := l.layers(ctx, key, limits, n, modeRefund)
	return err
}

func (l *Limiter) layers(ctx context.Context, key string, limits []Limit, n, mode int) ([]Result, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	if len(limits) == 0 || len(limits) > maxLayers {
		return nil, fmt.Errorf("%w: AllowLayers takes 1 to %d Limits, got %d", ErrInvalidLimit, maxLayers, len(limits))
	}
	tag := escapeTag(key)
	keys := make([]string, 0, 2*len(limits))
	first := make([]string, len(limits)) // each layer's first key
	args := make([]any, 2, 2+5*len(limits))
	args[0], args[1] = mode, n
	for i, limit := range limits {
		pr, err := l.prepare(limit)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if n <= 0 || int64(n) > pr.p.capacity {
			return nil, fmt.Errorf("%w: n = %d, want 1 <= n <= %d (the capacity of layer %d)", ErrInvalidCost, n, pr.p.capacity, i)
		}
		if mode == modeRefund && !algorithms[limit.Algorithm].refund {
			return nil, fmt.Errorf("%w: layer %d: %s cannot give units back", ErrInvalidCost, i, limit.Algorithm)
		}
		first[i] = stateKeys(nil, l.prefix, tag, limit.Algorithm, i)[0]
		keys = stateKeys(keys, l.prefix, tag, limit.Algorithm, i)
		args = append(append(args, int(limit.Algorithm)+1), pr.args...)
	}
	var out []Result
	var err error
	if l.breaker.allow(time.Now()) {
		var v any
		v, err = l.do(ctx, func(ctx context.Context) (any, error) {
			return layersScript.Run(ctx, l.rdb, keys, args...).Result()
		})
		if err == nil {
			out, err = parseLayers(v, len(limits))
		}
		l.breaker.record(ctx, err, time.Now())
	} else {
		err = ErrUnavailable
	}
	if err != nil {
		if l.fallback != nil && mode == modeConsume && redisFault(ctx, err) {
			return l.fallback.allowLayers(first, limits, n, time.Now())
		}
		return nil, err
	}
	return out, nil
}

func parseLayers(v any, layers int) ([]Result, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 1+5*layers {
		return nil, fmt.Errorf("%w: want %d integers, got %T %v", errBadReply, 1+5*layers, v, v)
	}
	granted, ok := vals[0].(int64)
	if !ok {
		return nil, fmt.Errorf("%w: element 0 is %T, want int64", errBadReply, vals[0])
	}
	out := make([]Result, layers)
	if err := parseResults(vals[1:], out); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Granted = int(granted)
	}
	return out, nil
}
