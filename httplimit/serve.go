package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/redlimit/redlimit/core"
)

// HeaderWriter is a response's header, as every framework has it:
// http.Header (net/http, Gin, Echo) satisfies it; the Fiber adapters wrap
// their context.
type HeaderWriter interface {
	Get(name string) string
	Set(name, value string)
}

// Serve is an adapter's middleware step: it decides r at Config.Cost,
// writes the rate-limit headers into h and, if the request proceeds, calls
// next to serve the handler with ctx. When wantStatus (Config.CountIf),
// next returns the status the handler answered; else Serve ignores it, so
// net/http need not wrap its ResponseWriter. A request that does not
// proceed is the adapter's to answer, with the Decision's Status and Body.
// Serve returns once the handler has, after giving back what CountIf,
// InFlight and Settle say (as for a 500 if next panics).
func (p *Policy) Serve(r Request, h HeaderWriter, next func(ctx context.Context, wantStatus bool) (status int)) Decision {
	d := p.decideRequest(r, 0, false)
	d.writeHeaders(h)
	switch {
	case !d.Proceed():
	case !d.wantsFinish():
		next(r.Context(), false)
	default:
		status := http.StatusInternalServerError // unless next returns
		defer func() { d.finish(status) }()
		status = next(d.attach(r.Context()), p.countIf != nil)
	}
	return d
}

// Check decides r at cost n from inside a handler, for limits that depend
// on what the request holds, and writes the rate-limit headers into h. It
// takes no InFlight permit: nothing would give it back when the request
// ends, and the middleware holds the request's own.
func (p *Policy) Check(r Request, h HeaderWriter, n int) Decision {
	d := p.decideRequest(r, n, true)
	d.writeHeaders(h)
	return d
}

// ReportCost tells p what the request served with ctx really cost, for
// Config.Settle: Serve settles the last report when the handler returns.
// It reports false when there is nothing to settle: p does not settle, or
// took no units for this request. ctx is the handler's (r.Context(),
// c.Request.Context(), Fiber's c.UserContext()).
func (p *Policy) ReportCost(ctx context.Context, units int) bool {
	v, ok := ctx.Value(settleKey{p}).(*atomic.Int64)
	if !ok || units < 0 {
		return false
	}
	v.Store(int64(units))
	return true
}

// writeHeaders writes the response headers of the decision into h: the
// rate-limit fields of Config.Headers when Redis decided, and Retry-After
// when the request is refused for a while. The local fallback's decisions
// carry no fields: its Remaining is this instance's share, not the key's
// (TestFallbackDecisionsCarryNoFields). Several Policies
// on one route compose: each reads what the ones before it wrote, so the
// IETF fields list every policy, X-RateLimit-* describe the most
// restrictive (the lowest Remaining), and Retry-After is the longest wait.
// Under Config.Settle they are written when the request is admitted,
// before its handler reports what it used: Remaining is what was left
// after its Cost, not after the settlement, which the key's next
// response reports.
func (d *Decision) writeHeaders(h HeaderWriter) {
	if d.policy != nil && !d.Result.Fallback && (d.Outcome == OutcomeAllowed || d.Outcome == OutcomeDenied || d.Outcome == OutcomeInFlight) {
		for _, s := range d.policy.headers {
			s.writeHeaders(h, d)
		}
	}
	if s := d.RetryAfter(); s > 0 {
		if prev, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err != nil || prev < s {
			h.Set("Retry-After", strconv.FormatInt(s, 10))
		}
	}
}

// wantsFinish reports whether the Policy must hear how the request ended
// (Config.CountIf, Config.InFlight, Config.Settle): then the handler is
// served with attach's context, and its status goes to finish.
func (d *Decision) wantsFinish() bool {
	p := d.policy
	return p != nil && (p.countIf != nil || d.holdsPermit() || p.settle) && d.took && d.Proceed()
}

// holdsPermit reports that d's layers end in an InFlight permit: the
// Policy has one, and d was decided for a whole request, not by Check.
func (d *Decision) holdsPermit() bool { return d.policy.inflight.Rate > 0 && !d.inHandler }

// attach returns the context to serve the handler with: ctx carrying the
// decision, for ReportCost, when the Policy settles costs (Config.Settle);
// under Config.InFlight, ctx cancelled with the cause ErrPermitLost if
// the request's permit is lost while it runs, and once finish is called;
// else ctx itself.
func (d *Decision) attach(ctx context.Context) context.Context {
	if d.renewal != nil {
		ctx = d.renewal.attach(ctx)
	}
	if d.policy == nil || !d.policy.settle || !d.took {
		return ctx
	}
	d.reported = new(atomic.Int64)
	d.reported.Store(-1)
	return context.WithValue(ctx, settleKey{d.policy}, d.reported)
}

type settleKey struct{ p *Policy }

// finish tells the Policy the status the handler answered with, once it
// has returned: the InFlight permit is given back; under Config.CountIf a
// request whose status does not count gets its units back; under
// Config.Settle a reported cost is settled. The calls are bounded by the
// Limiter's timeout and run even when the request's context has ended. A
// failed give-back errs on the strict side (the units stay spent; a permit
// lapses by itself); a failed charge of a reported cost above the estimate
// is lost, so the client has spent only the estimate. Neither is reported
// to the Observer: the decision was.
func (d *Decision) finish(status int) {
	if !d.wantsFinish() {
		return
	}
	d.renewal.stop()
	p := d.policy
	ctx := context.WithoutCancel(d.ctx)
	refund := p.countIf != nil && !p.countIf(status)
	used := int64(-1)
	if d.reported != nil {
		used = d.reported.Load()
	}
	if !d.took {
		return
	}
	switch {
	case refund:
		_ = p.limiter.Refund(ctx, d.taken)
	default:
		if used >= 0 {
			_, _ = p.limiter.Settle(ctx, d.taken, int(used))
		}
		if d.holdsPermit() {
			d.givePermitBack(ctx)
		}
	}
}

// permit is d's receipt of its InFlight permit alone: what a Refund or a
// Renew of d's rules gives back or keeps.
func (d *Decision) permit() core.Result {
	if d.taken.Rules == nil {
		return d.taken // the permit is the one Rule
	}
	parts := make([]core.Result, len(d.layers))
	parts[len(parts)-1] = d.layers[len(d.layers)-1].Result
	r := d.taken
	r.Rules = parts
	return r
}

// givePermitBack gives back the InFlight permit d's rules took.
func (d *Decision) givePermitBack(ctx context.Context) {
	_ = d.policy.limiter.Refund(ctx, d.permit())
}
