package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
)

// Outcome is what a request gets from a Decision. String is its
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
	// OutcomeFailedClosed: the Limiter failed under FailClosed, or could
	// not decide for a reason that is not Redis' (a cost or Limit that can
	// never pass, a closed Limiter), failing open or closed; 503.
	OutcomeFailedClosed
	// OutcomeCanceled: the request's context ended during the decision or
	// while it waited for its LeakyBucket delay; nobody is there to answer.
	OutcomeCanceled
	// OutcomeNoKey: the key function could not key the request; 400,
	// unless Config.ServeUnkeyed serves it unlimited.
	OutcomeNoKey
	// OutcomeInFlight: too many requests of the key are in flight
	// (Config.InFlight); 429, unless the Policy is a dry run.
	OutcomeInFlight
)

// String returns the outcome's snake_case name.
func (o Outcome) String() string {
	if int(o) < len(observe.Outcomes) {
		return observe.Outcomes[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is a Policy's answer for one request.
type Decision struct {
	// Policy is the name of the Policy that decided (Config.Name).
	Policy string
	// Outcome is what the request gets.
	Outcome Outcome
	// Key is what the key function returned for the request ("ip:192.0.2.1",
	// "h:X-Api-Key:..."), "" when it could not key it. It is the client's
	// data: log it where that is allowed, never use it as a metric label
	// (the keys are unbounded, and so would the series be).
	Key string
	// Result is the Limiter's answer to report: the strictest rate
	// limit's (the refusing one's, when one refuses), or the InFlight
	// permit's refusal (zero when there was none).
	Result core.Result
	// Limit is the Limit the key was decided under: Config.Limit, or the
	// one LimitFunc chose.
	Limit core.Limit
	// Err is the failure behind OutcomeFailedOpen, OutcomeFailedClosed,
	// OutcomeCanceled and OutcomeNoKey.
	Err error
	// Latency is how long the decision took, without a LeakyBucket wait.
	Latency time.Duration
	// RefusedBy names the limit that refused the request when Outcome is
	// OutcomeDenied or OutcomeInFlight, a dry run's too: "0" for the Limit,
	// "1", "2", ... for Config.Layers in order, a Scope's Name, "inflight"
	// for the InFlight permit; "" for any other outcome. They are
	// the suffixes of the IETF members ("http-1" is layer 1) and the values
	// of the metrics' refused_by label: a fixed set per Policy, never the
	// key. When several refuse, it is the one Result reports.
	RefusedBy string
	// Degraded says why the decision was made without Redis, for the
	// metrics. It is "fallback" (the local fallback decided), or "breaker",
	// "fail_open" or "fail_closed" (Redis failed: what a metric of Redis
	// errors counts; see docs/operations.md); "" when Redis decided.
	Degraded string

	policy    *Policy
	ctx       context.Context
	key       string // as sent to the Limiter ("<name>:<key>")
	cost      int
	capacity  int           // of the layer Result reports
	rules     []core.Rule   // the request's (see Policy.rules)
	layers    []layerResult // one per rule
	taken     core.Result   // the Limiter's, the receipt of every rule
	took      bool          // every rule took cost
	reported  *atomic.Int64 // the cost a handler reported (Config.Settle), -1: none
	inHandler bool          // decided by Check, which takes no InFlight permit
	renewal   *renewal      // keeps the InFlight permit while the handler runs
}

// layerResult is one rule's answer, with the Limit it was decided under.
type layerResult struct {
	core.Result
	limit core.Limit
}

func (r layerResult) inflight() bool { return shapeOf(r.limit.Algorithm).permits }

// redisFault reports a Limiter failure that was Redis' (an error, a
// timeout, an open circuit: d.Err matches core.ErrUnavailable), not the
// request's nor the caller's (a cost or Limit that can never pass, a
// closed Limiter).
func (d *Decision) redisFault() bool {
	return (d.Outcome == OutcomeFailedOpen || d.Outcome == OutcomeFailedClosed) && errors.Is(d.Err, core.ErrUnavailable)
}

// nearLimit reports whether an admitted request left at most a fifth of
// the capacity of the layer Result reports (Remaining 2 of 10 is near, 3
// is not), as envoy's ratelimit counts near_limit: what operators alert on
// before clients see 429s (observe.Decisions.NearLimit). The InFlight
// permit never counts, nor does a decision of the local fallback, whose
// Remaining is this instance's share.
func (d *Decision) nearLimit() bool {
	capacity := int64(d.capacity)
	if capacity == 0 {
		capacity = int64(d.Limit.Capacity()) // a Decision made by hand
	}
	return d.Outcome == OutcomeAllowed && !d.Result.Fallback && capacity > 0 &&
		5*int64(d.Result.Remaining) <= capacity
}

// strictest is what to report of the key's rate layers: the denying layer
// with the longest RetryAfter if any denies, else the layer with the least
// Remaining (the longest ResetAfter among equals), carrying the longest
// Delay of any layer, since a request leaves only when every layer lets
// it. The InFlight permit is reported only when it alone refuses. It
// returns the reported layer's capacity, and its name (see RefusedBy)
// when it refuses.
func (d *Decision) strictest() (core.Result, int, string) {
	var best layerResult
	bestAt, found := 0, false
	delay := time.Duration(0)
	for i, r := range d.layers {
		if r.inflight() {
			continue
		}
		if r.Allowed {
			delay = max(delay, r.Delay)
		}
		switch {
		case !found:
			best, bestAt, found = r, i, true
		case best.Allowed != r.Allowed:
			if !r.Allowed {
				best, bestAt = r, i
			}
		case !r.Allowed:
			if r.RetryAfter > best.RetryAfter {
				best, bestAt = r, i
			}
		case r.Remaining < best.Remaining || r.Remaining == best.Remaining && r.ResetAfter > best.ResetAfter:
			best, bestAt = r, i
		}
	}
	if best.Allowed {
		if n := len(d.layers); d.layers[n-1].inflight() && !d.layers[n-1].Allowed {
			// Only the permit refuses: say so, with the rate layer's fields
			// for the X-RateLimit headers and the permit's wait.
			best.Allowed, best.Granted, best.Delay = false, 0, 0
			best.RetryAfter = d.layers[n-1].RetryAfter
			return best.Result, best.limit.Capacity(), d.layerName(n - 1)
		}
		best.Delay = delay
		return best.Result, best.limit.Capacity(), ""
	}
	return best.Result, best.limit.Capacity(), d.layerName(bestAt)
}

// layerName is what RefusedBy and the IETF members call d's rule i: "0"
// the Limit, "1".. the Layers, then the Scopes' names, "inflight".
func (d *Decision) layerName(i int) string {
	if d.layers[i].inflight() {
		return "inflight"
	}
	if s := i - 1 - len(d.policy.layers); s >= 0 && s < len(d.policy.scopes) {
		return d.policy.scopes[s].Name
	}
	return strconv.Itoa(i)
}

// inflightDenied reports that the InFlight permit, and no rate layer,
// refused the request.
func (d *Decision) inflightDenied() bool {
	for _, r := range d.layers {
		if !r.Allowed && !r.inflight() {
			return false
		}
	}
	return len(d.layers) > 0 && d.layers[len(d.layers)-1].inflight() && !d.layers[len(d.layers)-1].Allowed
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
		// ServeUnkeyed is for a request without a key of its own; one
		// whose Scope cannot be keyed would escape its own key's limit too.
		return p.serveUnkeyed && d.Key == "" || p.dryRun
	case OutcomeDenied, OutcomeInFlight, OutcomeFailedClosed:
		return p.dryRun
	}
	return false
}

// Status is the HTTP status to answer when the request does not proceed.
// It is 429 when denied (for its rate or its InFlight permit), 503 when
// the Limiter failed closed, 400 when the request has no key, 499 (client
// closed request) when its context ended first; 0 when it proceeds.
func (d *Decision) Status() int {
	if d.Proceed() {
		return 0
	}
	switch d.Outcome {
	case OutcomeDenied, OutcomeInFlight:
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
	case OutcomeDenied, OutcomeInFlight:
		return max(1, ceilSeconds(d.Result.RetryAfter))
	case OutcomeFailedClosed:
		return 1
	}
	return 0
}

// Body is the JSON body of a request that does not proceed, ending in a
// newline: {"error":"rate limit exceeded","retry_after":N} when denied,
// with N equal to Retry-After, {"error":"rate limiter unavailable"} when
// the Limiter failed closed, {"error":"missing rate limit key"} when the
// request has no key; nil when the request proceeds.
func (d *Decision) Body() []byte {
	switch {
	case d.Proceed():
		return nil
	case d.Outcome == OutcomeDenied || d.Outcome == OutcomeInFlight:
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

// context is the context of the request decided (observe.ContextOf). It
// may have ended by the time the Observer runs (OutcomeCanceled).
func (d *Decision) context() context.Context {
	if d.ctx == nil {
		return context.Background()
	}
	return d.ctx
}
