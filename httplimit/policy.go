package httplimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/adapt"
	"github.com/redlimit/redlimit/internal/keyspace"
	"github.com/redlimit/redlimit/internal/observe"
)

// Policy is a compiled Config: the decision step every adapter shares. It
// keys a request, asks the Limiter, waits out a LeakyBucket delay, applies
// the fail policy, and says what to answer. Make one with New; it is safe
// for concurrent use, and its settings cannot change after New.
type Policy struct {
	limiter      *core.Limiter
	limit        core.Limit
	limitFunc    func(Request, string) (core.Limit, bool)
	layers       []core.Limit // Config.Layers, MaxWait applied
	scopes       []Scope      // MaxWait applied
	inflight     core.Limit   // zero without Config.InFlight
	name         string
	quotedName   string // the IETF policy name, a structured-field string
	key          KeyFunc
	serveUnkeyed bool
	cost         func(Request) int
	countIf      func(int) bool
	settle       bool
	headers      Headers
	failClosed   bool
	dryRun       bool
	maxWait      time.Duration
	observers    []Observer
	noRoute      *atomic.Bool // logged once: a KeyByRoute mounted where no route is known
	losses       *lossLog     // InFlight permits lost while their requests ran
}

func init() { adapt.SetWithKey((*Policy).withKey) }

// withKey returns a copy of p that keys requests with key (adapt.WithKey).
func (p *Policy) withKey(key KeyFunc) *Policy {
	c := *p
	c.key = key
	return &c
}

// decideRequest is every request's one path: prepare, the Limiter, the
// outcome, a LeakyBucket's wait, and the Observers.
func (p *Policy) decideRequest(r Request, n int, inHandler bool) Decision {
	d := Decision{Policy: p.name, policy: p, Limit: p.limit, ctx: p.callContext(r.Context()), inHandler: inHandler}
	start := time.Now()
	if err := p.prepare(r, &d, n); err != nil {
		d.Err, d.Outcome = err, OutcomeNoKey
		if errors.Is(err, errNoRoute) && p.noRoute.CompareAndSwap(false, true) {
			if log := observe.Logger(p.limiter); log != nil {
				log.Warn("redlimit: KeyByRoute found no route: the middleware runs before routing, so every request is refused as unkeyable",
					"policy", p.name, "fix", "mount it on the routes (chi: r.With(mw), r.Group; net/http: wrap each handler)")
			}
		}
	} else {
		err = p.decide(&d)
		switch {
		case err != nil && d.ctx.Err() != nil:
			// The client went away: neither an outage to report nor a
			// request to serve.
			d.Err, d.Outcome = err, OutcomeCanceled
		case err != nil:
			// The fail policy is for Redis faults only. The rest is the
			// caller's (a cost or Limit that can never be admitted, a
			// closed Limiter): serving it would let a huge or negative cost
			// through, or every request once the Limiter is closed.
			d.Err, d.Outcome = err, OutcomeFailedClosed
			if !p.failClosed && errors.Is(err, core.ErrUnavailable) {
				d.Outcome = OutcomeFailedOpen
			}
		case p.failClosed && d.Result.Fallback:
			// Redis did not decide: FailClosed refuses what the local
			// fallback would have served.
			d.Err, d.Outcome = errFallbackClosed, OutcomeFailedClosed
		case !d.Result.Allowed && d.inflightDenied():
			d.Outcome = OutcomeInFlight
		case !d.Result.Allowed:
			d.Outcome = OutcomeDenied
		}
	}
	d.Latency = time.Since(start)
	if d.Outcome == OutcomeAllowed && d.Result.Delay > 0 && !p.dryRun {
		if err := sleep(d.ctx, d.Result.Delay); err != nil {
			d.Outcome, d.Err = OutcomeCanceled, err
		}
	}
	if d.Outcome == OutcomeAllowed && d.holdsPermit() && d.took {
		d.renewal = newRenewal(&d, start)
	}
	if d.took && d.holdsPermit() && !d.Proceed() {
		// No handler runs to give the permit back (the client left during
		// a LeakyBucket wait): without this the key would be refused for
		// its permit until the lease lapses. Its rate units stay spent.
		d.givePermitBack(context.WithoutCancel(d.ctx))
	}
	p.observe(&d)
	return d
}

// prepare is what d is decided under: the key first, so that a request
// that cannot be keyed calls no hook of the user's and costs Redis
// nothing; then the cost (n, or Config.Cost when n is 0), the Limit
// (Config.LimitFunc) and the rules.
func (p *Policy) prepare(r Request, d *Decision, n int) error {
	key, err := p.key(r)
	if err == nil && key == "" {
		// Never one shared bucket for every request that has no key.
		err = errEmptyKey
	}
	if err != nil {
		return err
	}
	d.Key, d.key = key, keyspace.Policy(p.name, key)
	d.cost = n
	if n == 0 {
		d.cost = 1
		if p.cost != nil {
			d.cost = p.cost(r)
		}
	}
	if p.limitFunc != nil {
		if l, ok := p.limitFunc(r, key); ok {
			d.Limit = l
		}
	}
	d.rules, err = p.rules(r, d.key, d.Limit, d.inHandler)
	return err
}

// rules are what a request is decided under: its key's Limit and Layers,
// the Scopes, and last the key's InFlight permit (not for Check, which
// takes none). The key's own come first: on a Cluster, where keys in other
// slots are decided one slot after another, the Scopes (a ceiling shared
// by everyone) are asked only for requests the key admits.
func (p *Policy) rules(r Request, key string, limit core.Limit, inHandler bool) ([]core.Rule, error) {
	rules := make([]core.Rule, 0, 2+len(p.layers)+len(p.scopes))
	rules = append(rules, p.capWait(limit).For(key))
	for _, l := range p.layers {
		rules = append(rules, l.For(key))
	}
	for _, sc := range p.scopes {
		var sk string // "": a ceiling on the Policy
		if sc.Key != nil {
			var err error
			sk, err = sc.Key(r)
			if err == nil && sk == "" {
				err = errEmptyKey
			}
			if err != nil {
				return nil, fmt.Errorf("scope %s: %w", sc.Name, err)
			}
		}
		rules = append(rules, sc.Limit.For(keyspace.Scope(p.name, sc.Name, sk)))
	}
	if p.inflight.Rate > 0 && !inHandler {
		rules = append(rules, p.inflight.For(key))
	}
	return rules, nil
}

func (p *Policy) decide(d *Decision) error {
	res, err := p.limiter.Allow(d.ctx, d.cost, d.rules...)
	if err != nil {
		return err
	}
	d.taken = res
	d.layers = make([]layerResult, len(d.rules))
	for i, rule := range d.rules {
		d.layers[i].limit = rule.Limit
		if res.Rules != nil {
			d.layers[i].Result = res.Rules[i]
		} else {
			d.layers[i].Result = res
		}
	}
	d.Result, d.capacity, d.RefusedBy = d.strictest()
	d.took = res.Granted > 0
	return nil
}

// Reset forgets the state of r's key under this Policy, in every layer,
// so its quota is whole (after a successful login, say). The Scopes are
// shared and left alone, and so are the InFlight permits of the key's
// requests still running (see core.Limiter.Reset). Each adapter has a Reset that takes the
// framework's request.
func (p *Policy) Reset(r Request) error {
	key, err := p.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if err != nil {
		return err
	}
	return p.limiter.Reset(r.Context(), keyspace.Policy(p.name, key))
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

// errFallbackClosed is the error of a request FailClosed refused because
// the Limiter's local fallback, not Redis, decided it.
var errFallbackClosed = fmt.Errorf("%w: the local fallback decided, and the policy fails closed", core.ErrUnavailable)
