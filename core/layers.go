package core

import (
	"context"
	"fmt"
)

// AllowLayers decides a request of cost n against several Limits of one
// key at once, such as 10 per second and 1000 per hour, or a rate and a
// Concurrency: it is admitted only if every layer admits, and then takes n
// from each; when any layer denies, none is taken. All layers are decided
// in one script, in one round trip, atomically, on the same path as
// AllowN (batching, the deny cache, the breaker, the local fallback):
// their keys share the caller's hash tag, so this works on Redis Cluster
// too. Results are in the order of limits (at most 8); each says whether
// its layer admits, and Granted is n in all of them only when the request
// was admitted.
//
// Layer i > 0 keeps its state apart from a plain Allow of the same key, so
// changing the number of layers does not mix their counters; layer 0 is
// the same state as Allow(ctx, key, limits[0]).
func (l *Limiter) AllowLayers(ctx context.Context, key string, limits []Limit, n int) ([]Result, error) {
	return l.layered(ctx, key, limits, nil, n, modeConsume, func(Limit) bool { return true })
}

// RefundLayers gives back what taken (the Results of an AllowLayers that
// admitted a request) took, as Refund does for one Limit, from every layer
// whose Result has Granted > 0: zero a layer's Result to leave that layer
// alone. Refund's receipt rules hold: taken[i] must come from layer i of
// key, and taken is refunded or settled once.
func (l *Limiter) RefundLayers(ctx context.Context, key string, limits []Limit, taken []Result) error {
	_, err := l.layered(ctx, key, limits, taken, granted(limits, taken), modeRefund, func(Limit) bool { return true })
	return err
}

// SettleLayers corrects what taken took to used, as Settle does for one
// Limit (with its bounds on a debt, layer by layer, and its receipt
// rules), in every layer whose Result has Granted > 0, but Concurrency's.
func (l *Limiter) SettleLayers(ctx context.Context, key string, limits []Limit, taken []Result, used int) ([]Result, error) {
	n, mode, err := correction(max(granted(limits, taken), 0), used)
	if err != nil {
		return nil, err
	}
	rates := func(lim Limit) bool { return lim.Algorithm != Concurrency }
	if n == 0 {
		return append([]Result(nil), taken...), nil
	}
	out, err := l.layered(ctx, key, limits, taken, n, mode, rates)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Allowed, out[i].Granted, out[i].RetryAfter = taken[i].Allowed, taken[i].Granted, 0
	}
	return out, nil
}

// RenewLayers keeps the Concurrency permits that taken holds, as Renew
// does for one Limit (taking a lapsed one again when there is room); the
// other layers are left alone.
func (l *Limiter) RenewLayers(ctx context.Context, key string, limits []Limit, taken []Result) ([]Result, error) {
	return l.layered(ctx, key, limits, taken, 1, modeRenew, func(lim Limit) bool { return lim.Algorithm == Concurrency })
}

// granted is the n the rate layers of taken took (a Concurrency layer's
// Granted is its one permit, whatever the cost), or 1 for permits alone.
func granted(limits []Limit, taken []Result) int {
	n := 0
	for i, r := range taken {
		if r.Granted > 0 {
			if i < len(limits) && limits[i].Algorithm == Concurrency {
				n = max(n, 1)
				continue
			}
			return r.Granted
		}
	}
	return n
}

// layered decides a request on the layers of limits that want reports true
// for and, when taken is given, took units (Granted > 0); the Results of
// the others are left zero.
func (l *Limiter) layered(ctx context.Context, key string, limits []Limit, taken []Result, n, mode int, want func(Limit) bool) ([]Result, error) {
	if len(limits) == 0 || len(limits) > maxLayers {
		return nil, fmt.Errorf("%w: AllowLayers takes 1 to %d Limits, got %d", ErrInvalidLimit, maxLayers, len(limits))
	}
	if taken != nil && len(taken) != len(limits) {
		return nil, fmt.Errorf("%w: %d Results for %d layers", ErrInvalidCost, len(taken), len(limits))
	}
	var mask uint8
	rq := request{key: key, n: n, mode: mode}
	for i, lim := range limits {
		if !want(lim) || taken != nil && taken[i].Granted <= 0 {
			continue
		}
		mask |= 1 << i
		if taken == nil {
			continue
		}
		if (mode == modeRefund || mode == modeCharge) && lim.Algorithm.known() && taken[i].foreign(key, lim.row(), i) {
			return nil, fmt.Errorf("layer %d: %w", i, errForeignReceipt)
		}
		if lim.Algorithm == Concurrency {
			rq.id = taken[i].stamp
		} else {
			rq.taken = taken[i].stamp
		}
	}
	out := make([]Result, len(limits))
	if mask == 0 {
		return out, nil // nothing to give back, settle or keep
	}
	pl, err := l.plans.ofLayers(limits, mask)
	if err != nil {
		return nil, err
	}
	rq.pl = pl
	sub := make([]Result, len(pl.layers))
	if err := l.decide(ctx, &rq, sub); err != nil {
		return nil, err
	}
	for i, ly := range pl.layers {
		out[ly.index] = sub[i]
		if sub[i].Granted > 0 && mode == modeConsume {
			out[ly.index].owner = receipt(key, ly.row, ly.index)
		}
	}
	return out, nil
}
