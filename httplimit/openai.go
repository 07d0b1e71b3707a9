package httplimit

import (
	"fmt"
	"strconv"
	"time"
)

// OpenAI is the header style of OpenAI's API, which the clients of
// OpenAI-compatible APIs read. It sends x-ratelimit-limit-requests (the
// capacity), x-ratelimit-remaining-requests (what remains) and
// x-ratelimit-reset-requests (the time until the quota is whole again, as
// a Go duration rounded up to the millisecond: "1s", "6m0s", "20ms").
// Unit names the fields' suffix: "requests" by default, or "tokens" for a
// Policy whose Cost counts tokens. Of several Policies of one unit, the
// fields describe the one with the least remaining. A refusal also
// carries retry-after-ms, the wait in milliseconds rounded up, and
// x-should-retry: false when that wait is above 60 s, which OpenAI's
// clients would cut short (TestOpenAIRetryFields).
type OpenAI struct {
	Unit string // Default: "requests"
}

// writeHeaders writes the three fields of o's unit, unless a Policy before
// this one wrote them with less remaining (or as little, and this one
// admits). A Policy writes them through the names New compiles once.
func (o OpenAI) writeHeaders(h HeaderWriter, d *Decision) {
	if f, err := o.fields(); err == nil {
		f.writeHeaders(h, d)
	}
}

// fields is o with its field names made, in canonical form (see
// XRateLimit.canonical), or an error naming a Unit no field name can hold.
func (o OpenAI) fields() (openAIFields, error) {
	unit := or(o.Unit, "requests")
	if !validHeaderName(unit) {
		return openAIFields{}, fmt.Errorf("httplimit: OpenAI.Unit %q cannot end a header name", o.Unit)
	}
	return openAIFields{
		limit:     canonicalName("X-Ratelimit-Limit-" + unit),
		remaining: canonicalName("X-Ratelimit-Remaining-" + unit),
		reset:     canonicalName("X-Ratelimit-Reset-" + unit),
	}, nil
}

// openAIFields is an OpenAI style compiled by New.
type openAIFields struct{ limit, remaining, reset string }

func (f openAIFields) writeHeaders(h HeaderWriter, d *Decision) {
	r := d.Result
	writeRetryMillis(h, d) // the longest wait, whichever Policy's fields stand
	if prev, err := strconv.Atoi(h.Get(f.remaining)); err == nil && (prev < r.Remaining || prev == r.Remaining && r.Allowed) {
		return // an earlier Policy's is as strict: a refusal is stricter
	}
	h.Set(f.limit, strconv.Itoa(d.capacity))
	h.Set(f.remaining, strconv.Itoa(r.Remaining))
	h.Set(f.reset, ceilMillis(r.ResetAfter).String())
}

// maxClientRetry is the longest wait OpenAI's clients honour: beyond it
// the Node SDK retries after its own backoff, early.
const maxClientRetry = 60 * time.Second

// writeRetryMillis writes a refusal's retry-after-ms, the longest of the
// Policies' that compose, and x-should-retry: false beyond maxClientRetry.
func writeRetryMillis(h HeaderWriter, d *Decision) {
	if d.RetryAfter() == 0 {
		return
	}
	wait := max(time.Millisecond, ceilMillis(d.Result.RetryAfter))
	ms := wait.Milliseconds()
	if prev, err := strconv.ParseInt(h.Get("Retry-After-Ms"), 10, 64); err == nil && prev >= ms {
		return
	}
	h.Set("Retry-After-Ms", strconv.FormatInt(ms, 10))
	if wait > maxClientRetry {
		h.Set("X-Should-Retry", "false")
	}
}

// ceilMillis is d rounded up to a whole millisecond, so that a client that
// waits it out is never early.
func ceilMillis(d time.Duration) time.Duration {
	if rest := d % time.Millisecond; rest > 0 {
		d += time.Millisecond - rest
	}
	return d
}
