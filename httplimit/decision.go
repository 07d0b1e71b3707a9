package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
)

// Outcome is what a request gets from a Decision. Its text form is its
// snake_case name, as the metrics label it.
type Outcome uint8

const (
	// OutcomeAllowed: the request proceeds, with rate-limit headers.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: 429, unless the Policy is a dry run.
	OutcomeDenied
	// OutcomeFailedOpen: the Limiter failed; the request proceeds without
	// rate-limit headers.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the Limiter failed, or the cost can never pass;
	// 503.
	OutcomeFailedClosed
	// OutcomeCanceled: the request's context ended during the decision or
	// while it waited for its LeakyBucket delay; nobody is there to answer.
	OutcomeCanceled
	// OutcomeNoKey: the key function could not key the request; 400,
	// unless Config.ServeUnkeyed serves it unlimited.
	OutcomeNoKey
)

var outcomeNames = [...]string{"allowed", "denied", "failed_open", "failed_closed", "canceled", "no_key"}

// String returns the outcome's snake_case name.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText returns the outcome's snake_case name.
func (o Outcome) MarshalText() ([]byte, error) {
	if int(o) >= len(outcomeNames) {
		return nil, fmt.Errorf("httplimit: Outcome %d is unknown", o)
	}
	return []byte(outcomeNames[o]), nil
}

// Decision is a Policy's answer for one request.
type Decision struct {
	// Policy is the name of the Policy that decided (Config.Name).
	Policy string
	// Outcome is what the request gets.
	Outcome Outcome
	// Result is the Limiter's answer to report: the strictest layer's, or
	// the Global's denial (zero when there was none).
	Result core.Result
	// Limit is the Limit the key was decided under: Config.Limit, or the
	// one LimitFunc chose.
	Limit core.Limit
	// Err is the failure behind OutcomeFailedOpen, OutcomeFailedClosed,
	// OutcomeCanceled and OutcomeNoKey.
	Err error
	// Latency is how long the decision took, without a LeakyBucket wait.
	Latency time.Duration

	policy      *Policy
	ctx         context.Context
	now         time.Time
	key         string // as sent to the Limiter ("<name>:<key>")
	cost        int
	capacity    int           // of the layer Result reports
	main        layerResult   // the key's Limit
	extra       []layerResult // Config.Layers
	global      layerResult
	askedGlobal bool
	took        bool // the key's layers took cost
	tookGlobal  bool
}

// layerResult is one layer's answer, with what the headers say of it.
type layerResult struct {
	core.Result
	capacity int
	period   time.Duration
}

// RedisFault reports a Limiter failure that was Redis' (an error, a
// timeout, an open circuit), not the request's: what a metric of Redis
// errors counts.
func (d *Decision) RedisFault() bool {
	return (d.Outcome == OutcomeFailedOpen || d.Outcome == OutcomeFailedClosed) && !isCallerError(d.Err)
}

// strictest is what to report of the key's layers: the denying layer with
// the longest RetryAfter if any denies, else the layer with the least
// Remaining (the longest ResetAfter among equals), carrying the longest
// Delay of any layer, since a request leaves only when every layer lets it.
func (d *Decision) strictest() (core.Result, int) {
	best := d.main
	delay := d.main.Delay
	for _, r := range d.extra {
		if r.Allowed {
			delay = max(delay, r.Delay)
		}
		switch {
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
	return best.Result, best.capacity
}

// eachLayer calls f with each layer's answer, the key's Limit first.
func (d *Decision) eachLayer(f func(i int, r layerResult)) {
	f(0, d.main)
	for i, r := range d.extra {
		f(i+1, r)
	}
}

// Proceed reports whether the request should go on to the handler.
func (d *Decision) Proceed() bool {
	p := d.policy
	if p == nil {
		p = &Policy{} // a Decision made by hand, not by a Policy
	}
	switch d.Outcome {
	case OutcomeAllowed, OutcomeFailedOpen:
		return true
	case OutcomeNoKey:
		return p.serveUnkeyed || p.dryRun
	case OutcomeDenied, OutcomeFailedClosed:
		return p.dryRun
	}
	return false
}

// Status is the HTTP status to answer when the request does not proceed:
// 429 when denied, 503 when the Limiter failed closed, 400 when the
// request has no key, 499 (client closed request) when its context ended
// first; 0 when it proceeds.
func (d *Decision) Status() int {
	if d.Proceed() {
		return 0
	}
	switch d.Outcome {
	case OutcomeDenied:
		return http.StatusTooManyRequests
	case OutcomeFailedClosed:
		return http.StatusServiceUnavailable
	case OutcomeNoKey:
		return http.StatusBadRequest
	}
	return 499
}

// RetryAfter is the Retry-After value in whole seconds, rounded up and at
// least 1, so a client that obeys it never comes back too early; 1 when the
// Limiter failed closed; 0 when the request proceeds, has no key, or was
// canceled.
func (d *Decision) RetryAfter() int64 {
	if d.Proceed() {
		return 0
	}
	switch d.Outcome {
	case OutcomeDenied:
		return max(1, ceilSeconds(d.Result.RetryAfter))
	case OutcomeFailedClosed:
		return 1
	}
	return 0
}

// WriteHeaders writes the response headers of the decision through set,
// which every framework has in this shape (http.Header.Set, gin's
// c.Header, echo's Response().Header().Set, fiber's c.Set): the rate-limit
// fields of Config.Headers when the Limiter decided, and Retry-After when
// the request is refused for a while.
func (d *Decision) WriteHeaders(set func(name, value string)) {
	if d.policy != nil && (d.Outcome == OutcomeAllowed || d.Outcome == OutcomeDenied) {
		for _, h := range d.policy.headers {
			h.WriteHeaders(set, d)
		}
	}
	if s := d.RetryAfter(); s > 0 {
		set("Retry-After", strconv.FormatInt(s, 10))
	}
}

// Body is the body, application/json, of a request that does not proceed,
// ending in a newline: {"error":"rate limit exceeded","retry_after":N} when denied,
// with N equal to Retry-After, {"error":"rate limiter unavailable"} when
// the Limiter failed closed, {"error":"missing rate limit key"} when the
// request has no key. nil when the request proceeds.
func (d *Decision) Body() []byte {
	switch {
	case d.Proceed():
		return nil
	case d.Outcome == OutcomeDenied:
		b := append(make([]byte, 0, 64), `{"error":"rate limit exceeded","retry_after":`...)
		b = strconv.AppendInt(b, d.RetryAfter(), 10)
		return append(b, "}\n"...)
	case d.Outcome == OutcomeFailedClosed:
		return []byte("{\"error\":\"rate limiter unavailable\"}\n")
	case d.Outcome == OutcomeNoKey:
		return []byte("{\"error\":\"missing rate limit key\"}\n")
	}
	return []byte("{\"error\":\"request canceled\"}\n")
}

// WantsStatus reports whether the Policy counts by response status
// (Config.CountIf) and this request took units: then the adapter passes
// the handler's status to Finish.
func (d *Decision) WantsStatus() bool {
	return d.policy != nil && d.policy.countIf != nil && (d.took || d.tookGlobal) && d.Proceed()
}

// Finish tells the Policy the status the handler answered with. Under
// Config.CountIf, a request whose status does not count gets its units
// back. The refund is bounded by the Limiter's timeout, and runs even when
// the request's context has ended; a failed refund errs on the strict side
// and is not reported.
func (d *Decision) Finish(status int) {
	if !d.WantsStatus() || d.policy.countIf(status) {
		return
	}
	p := d.policy
	ctx := context.WithoutCancel(d.ctx)
	if d.took {
		limit := p.capWait(d.Limit)
		if len(p.layers) == 0 {
			_ = p.limiter.Refund(ctx, d.key, limit, d.cost)
		} else {
			_ = p.limiter.RefundLayers(ctx, d.key, append([]core.Limit{limit}, p.layers...), d.cost)
		}
	}
	if d.tookGlobal {
		_ = p.limiter.Refund(ctx, p.globalKey, *p.global, d.cost)
	}
}

// isCallerError reports a failure that is the request's own: a cost or
// Limit that can never be admitted.
func isCallerError(err error) bool {
	return errors.Is(err, core.ErrInvalidCost) || errors.Is(err, core.ErrInvalidLimit)
}
