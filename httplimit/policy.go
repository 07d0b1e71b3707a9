package httplimit

import (
	"context"
	"errors"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Policy is a compiled Config: the decision step every adapter shares. It
// keys a request, asks the Limiter, waits out a LeakyBucket delay, applies
// the fail policy, and says what to answer. Make one with New; it is safe
// for concurrent use, and its settings cannot change after New.
type Policy struct {
	limiter      *core.Limiter
	limit        core.Limit
	limitFunc    func(Request) (core.Limit, bool)
	layers       []core.Limit // Config.Layers, MaxWait applied
	global       *core.Limit  // MaxWait applied
	name         string
	quotedName   string // the IETF policy name, a structured-field string
	globalKey    string
	key          KeyFunc
	serveUnkeyed bool
	cost         func(Request) int
	countIf      func(int) bool
	headers      Headers
	fail         FailPolicy
	dryRun       bool
	maxWait      time.Duration
	observer     Observer
}

// Observer is told of every decision, with all a Decision carries. It must
// be safe for concurrent use and fast: it runs on the request path. The
// metrics packages implement it.
type Observer interface {
	Observe(d Decision)
}

// Name is the Policy's name (Config.Name).
func (p *Policy) Name() string { return p.name }

// WithKey returns a copy of p that keys requests with key: for adapters
// whose framework has a key hook of its own (Fiber's KeyGenerator, Echo's
// IdentifierExtractor).
func (p *Policy) WithKey(key KeyFunc) *Policy {
	c := *p
	c.key = key
	return &c
}

// Decide decides r at the cost Config.Cost says (1 by default) and, for an
// admitted LeakyBucket request, waits out its Delay (or until r's context
// ends).
func (p *Policy) Decide(r Request) Decision {
	cost := 1
	if p.cost != nil {
		cost = p.cost(r)
	}
	return p.DecideN(r, cost)
}

// DecideN is Decide at cost n: from inside a handler, for limits that
// depend on what the request holds (see each adapter's Check).
func (p *Policy) DecideN(r Request, n int) Decision {
	d := Decision{Policy: p.name, policy: p, Limit: p.limit, cost: n, ctx: r.Context()}
	if p.limitFunc != nil {
		if l, ok := p.limitFunc(r); ok {
			d.Limit = l
		}
	}
	start := time.Now()
	key, err := p.key(r)
	if err == nil && key == "" {
		// Never one shared bucket for every request that has no key.
		err = errEmptyKey
	}
	if err != nil {
		d.Err, d.Outcome = err, OutcomeNoKey
	} else {
		d.key = p.name + ":" + key
		err = p.decide(&d)
		switch {
		case err != nil && d.ctx.Err() != nil:
			// The client went away: neither an outage to report nor a
			// request to serve.
			d.Err, d.Outcome = err, OutcomeCanceled
		case err != nil:
			d.Err, d.Outcome = err, OutcomeFailedOpen
			// A cost or Limit that can never be admitted is a caller error,
			// not an outage: serving it would let a huge or negative cost
			// through.
			if p.fail == FailClosed || errors.Is(err, core.ErrInvalidCost) || errors.Is(err, core.ErrInvalidLimit) {
				d.Outcome = OutcomeFailedClosed
			}
		case !d.Result.Allowed:
			d.Outcome = OutcomeDenied
		}
	}
	d.now = time.Now()
	d.Latency = d.now.Sub(start)
	if d.Outcome == OutcomeAllowed && d.Result.Delay > 0 && !p.dryRun {
		if err := sleep(d.ctx, d.Result.Delay); err != nil {
			d.Outcome, d.Err = OutcomeCanceled, err
		}
	}
	if p.observer != nil {
		p.observer.Observe(d)
	}
	return d
}

func (p *Policy) decide(d *Decision) error {
	limit := p.capWait(d.Limit)
	d.main.capacity, d.main.period = limit.Capacity(), limit.Period
	var err error
	if len(p.layers) == 0 {
		d.main.Result, err = p.limiter.AllowN(d.ctx, d.key, limit, d.cost)
	} else {
		limits := append(append(make([]core.Limit, 0, 1+len(p.layers)), limit), p.layers...)
		var rs []core.Result
		rs, err = p.limiter.AllowLayers(d.ctx, d.key, limits, d.cost)
		if err == nil {
			d.main.Result = rs[0]
			d.extra = make([]layerResult, len(rs)-1)
			for i, r := range rs[1:] {
				d.extra[i] = layerResult{Result: r, capacity: limits[i+1].Capacity(), period: limits[i+1].Period}
			}
		}
	}
	if err != nil {
		return err
	}
	d.Result, d.capacity = d.strictest()
	d.took = d.Result.Allowed
	if !d.Result.Allowed || p.global == nil {
		return nil
	}
	d.global.capacity, d.global.period = p.global.Capacity(), p.global.Period
	d.global.Result, err = p.limiter.AllowN(d.ctx, p.globalKey, *p.global, d.cost)
	if err != nil {
		return err
	}
	d.askedGlobal, d.tookGlobal = true, d.global.Allowed
	if !d.global.Allowed {
		d.Result, d.capacity = d.global.Result, d.global.capacity
	} else {
		// A request leaves when both the key and the ceiling let it.
		d.Result.Delay = max(d.Result.Delay, d.global.Delay)
	}
	return nil
}

// Reset forgets the state of r's key under this Policy, in every layer,
// so its quota is whole (after a successful login, say). The Global is
// shared and left alone. Each adapter has a Reset that takes the
// framework's request.
func (p *Policy) Reset(r Request) error {
	key, err := p.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return err
	}
	return p.limiter.Reset(r.Context(), p.name+":"+key)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
