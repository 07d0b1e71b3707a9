package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redlimit/redlimit/core"
)

// HeaderStyle is one style of rate-limit response fields: XRateLimit,
// IETF or OpenAI. Retry-After is not a style: every refused response
// carries it.
type HeaderStyle interface {
	// writeHeaders writes the style's fields for a decision the Limiter
	// made (allowed or denied) into h. Unexported: a style reads the
	// Decision's layers, which only this package sees.
	writeHeaders(h HeaderWriter, d *Decision)
}

// Headers are the styles a Policy writes, in order. Its text form names
// the built-in styles, comma-separated: "xratelimit", "ietf",
// "xratelimit,ietf" (or "both"), "openai" and "openai-tokens" (OpenAI's
// fields of unit requests and tokens), and "none" for an empty list, so
// Headers can come from a flag (flag.TextVar) or a config file.
type Headers []HeaderStyle

// XRateLimit is the X-RateLimit-* style, as GitHub sends it: the capacity,
// what remains, and the Unix epoch second at which the quota is whole
// again, rounded up (some peers send seconds from now instead; the IETF
// style's t is that). Its fields rename the headers; "" keeps the default.
// Field names are case-insensitive: Go writes them in canonical form,
// "X-Ratelimit-Limit". When several Policies decide one request, the
// fields describe the one with the least remaining.
type XRateLimit struct {
	Limit     string // Default: "X-RateLimit-Limit"
	Remaining string // Default: "X-RateLimit-Remaining"
	Reset     string // Default: "X-RateLimit-Reset"
}

// writeHeaders writes the three fields, for the layer the Decision
// reports, unless a Policy before this one wrote them with less remaining
// (or as little, and this one admits).
func (x XRateLimit) writeHeaders(h HeaderWriter, d *Decision) {
	r := d.Result
	remaining := or(x.Remaining, "X-Ratelimit-Remaining")
	if prev, err := strconv.Atoi(h.Get(remaining)); err == nil && (prev < r.Remaining || prev == r.Remaining && r.Allowed) {
		return // an earlier Policy's is as strict: a refusal is stricter
	}
	h.Set(or(x.Limit, "X-Ratelimit-Limit"), strconv.Itoa(d.capacity))
	h.Set(remaining, strconv.Itoa(r.Remaining))
	// Whole seconds and fractions apart: ResetAfter may be near the
	// longest time.Duration, beyond what Unix nanoseconds can add.
	// The decision's instant, Redis' clock, as ResetAfter's: never this
	// process' (TestHeadersOnTheDecisionClock).
	now := r.At
	frac := r.ResetAfter%time.Second + time.Duration(now.Nanosecond()) // < 2s
	reset := now.Unix() + int64(r.ResetAfter/time.Second) + ceilSeconds(frac)
	h.Set(or(x.Reset, "X-Ratelimit-Reset"), strconv.FormatInt(reset, 10))
}

// canonical is x with its names in canonical form. Field names are
// case-insensitive, and every framework sends the canonical form, but
// http.Header.Set converts any other form again on every call. (The
// defaults above are canonical: "X-Ratelimit-Limit" is how net/http
// writes "X-RateLimit-Limit".)
func (x XRateLimit) canonical() XRateLimit {
	return XRateLimit{canonicalName(x.Limit), canonicalName(x.Remaining), canonicalName(x.Reset)}
}

func or(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

func canonicalName(name string) string {
	if name == "" {
		return ""
	}
	return http.CanonicalHeaderKey(name)
}

// IETF is the header style of draft-ietf-httpapi-ratelimit-headers, the
// RateLimit-Policy and RateLimit fields. They hold one list member per
// policy, named by the Policy's name ("http"), or one per layer ("http-0",
// "http-1", "http-inflight" for the InFlight permit, "http-global" for the
// global ceiling); several Policies on one route each add their members.
// RateLimit-Policy's q per w (whole seconds) is a promise: a client that
// sends at most q units in every window of w seconds is never refused by
// that policy (how q and w are chosen: docs/http.md#responses). RateLimit's
// r is what remains of q, and t the seconds until r is q again: on a
// refusal, the same instant as Retry-After.
type IETF struct{}

// writeHeaders adds the policy's members to RateLimit-Policy and
// RateLimit.
func (IETF) writeHeaders(h HeaderWriter, d *Decision) {
	var polBuf, stateBuf [160]byte
	pol, state := polBuf[:0], stateBuf[:0]
	name := d.policy.quotedName[:len(d.policy.quotedName)-1] // without its closing quote
	// member appends one list member: the policy's name, then the suffix.
	member := func(suffix string, r layerResult) {
		if len(pol) > 0 {
			pol, state = append(pol, ", "...), append(state, ", "...)
		}
		for _, b := range [2]*[]byte{&pol, &state} {
			*b = append(append(append(*b, name...), suffix...), '"')
		}
		q, w := advertise(r.limit, r.At)
		pol = strconv.AppendInt(append(pol, ";q="...), q, 10)
		if r.inflight() {
			pol = append(pol, `;qu="concurrent-requests"`...)
		} else {
			pol = strconv.AppendInt(append(pol, ";w="...), w, 10)
		}
		state = strconv.AppendInt(append(state, ";r="...), remaining(r, q), 10)
		if !r.inflight() || !r.Allowed {
			state = strconv.AppendInt(append(state, ";t="...), untilWhole(r, q), 10)
		}
	}
	for i, r := range d.layers {
		switch {
		case len(d.layers) == 1:
			member("", r)
		case !r.Allowed && r.RetryAfter <= 0:
			// Not asked: a key in another Cluster slot, after one that
			// refused (see core.Result.Rules).
		default:
			member("-"+d.layerName(i), r)
		}
	}
	// Canonical forms of RateLimit-Policy and RateLimit (see XRateLimit).
	appendField(h, "Ratelimit-Policy", pol)
	appendField(h, "Ratelimit", state)
}

// appendField adds list members to a field another Policy may have set.
func appendField(h HeaderWriter, name string, members []byte) {
	if prev := h.Get(name); prev != "" {
		h.Set(name, prev+", "+string(members))
		return
	}
	h.Set(name, string(members))
}

// shape is what the fields need to know of an algorithm: how its quota
// comes back to a client. shapes has one row per core.Algorithm, so a new
// algorithm is one row here too: TestEveryAlgorithmHasAShape fails until
// it has one, and checks the row against what core does.
type shape struct {
	// refills: a bucket, whose units come back continuously at the rate,
	// up to Limit.Capacity (else Rate come back per window).
	refills bool
	// queues: an admitted request waits its Delay in a queue that a
	// MaxDelay bounds (LeakyBucket).
	queues bool
	// permits: requests in flight at once, not a rate (Concurrency).
	permits bool
	// periods is the window RateLimit-Policy promises over, in Periods: 2
	// for the sliding window counter, whose estimate weighs the previous
	// window.
	periods int
	// slices: a log whose entries above Rate 1024 each hold a 1024th of
	// the Period, so a unit may leave the window up to Period/1024 late
	// (SlidingWindow); the promised window is that much longer.
	slices bool
}

var shapes = [...]shape{
	core.TokenBucket:          {refills: true, periods: 1},
	core.SlidingWindow:        {periods: 1, slices: true},
	core.SlidingWindowCounter: {periods: 2},
	core.FixedWindow:          {periods: 1},
	core.LeakyBucket:          {refills: true, queues: true, periods: 1},
	core.Concurrency:          {permits: true, periods: 1},
}

// shapeOf is a's row of shapes; the zero shape when it has none.
func shapeOf(a core.Algorithm) shape {
	if int(a) < len(shapes) {
		return shapes[a]
	}
	return shape{}
}

// advertise is the quota q per window of w whole seconds that l admits
// from any client keeping to it: for a sliding window or a fixed one,
// Rate per Period rounded up to whole seconds (rate per two periods for
// the counter); for the buckets, what the rate refills in that time, but
// no more than the burst (and, under a MaxDelay, no more than waits it);
// for a Concurrency, Rate, with w 0.
func advertise(l core.Limit, now time.Time) (q, w int64) {
	s := shapeOf(l.Algorithm)
	switch {
	case s.permits:
		return int64(l.Rate), 0
	case l.Calendar != core.NoCalendar:
		return int64(l.Rate), calendarSeconds(l, now)
	}
	seconds := l.Period.Seconds() * float64(max(1, s.periods))
	if s.slices && l.Rate > 1024 {
		seconds += l.Period.Seconds() / 1024
	}
	w = max(1, int64(math.Ceil(seconds)))
	q = int64(l.Rate)
	if s.refills {
		q = min(int64(l.Capacity()), int64(float64(l.Rate)*float64(w)/l.Period.Seconds()))
	}
	if s.queues && l.MaxDelay > 0 {
		q = min(q, int64(float64(l.MaxDelay)*float64(l.Rate)/float64(l.Period))+1)
	}
	return max(1, q), w
}

// calendarSeconds is the length of the calendar window holding now.
func calendarSeconds(l core.Limit, now time.Time) int64 {
	start, end, _ := l.Window(now)
	return int64(end.Sub(start) / time.Second)
}

// remaining is RateLimit's r: what remains of q, and for a LeakyBucket
// under a MaxDelay no more than the requests its MaxDelay still lets in
// now (Result.Remaining is the room in its queue alone): each waits for
// the queue ahead to drain, the ResetAfter of r, and one unit's drain more
// for each admitted before it.
func remaining(r layerResult, q int64) int64 {
	left := min(int64(r.Remaining), q)
	if l := r.limit; shapeOf(l.Algorithm).queues && l.MaxDelay > 0 {
		room := l.MaxDelay - leakySlack(l) - r.ResetAfter
		if room < 0 {
			return 0
		}
		left = min(left, int64(float64(room)/unitTime(l))+1)
	}
	return max(0, left)
}

// unitTime is how long one unit of l takes to refill or drain (ns).
func unitTime(l core.Limit) float64 { return float64(l.Period) / float64(l.Rate) }

// leakySlack is what a LeakyBucket's delays may exceed their exact value
// by: the scripts round each up to a whole tick, 1µs unless the Limit is
// too large for µs (then about Burst × Period / 2^50, up to a power of 10).
func leakySlack(l core.Limit) time.Duration {
	return time.Microsecond + time.Duration(10*float64(l.Capacity())*float64(l.Period)/(1<<50))
}

// untilWhole is RateLimit's t: on a refusal the Retry-After of r; else the
// seconds, rounded up, until r's remaining is q again: the time to whole
// less what the units beyond q take to refill, for the buckets, and for a
// LeakyBucket under a MaxDelay no sooner than its queue has drained enough
// for q requests to fit within the MaxDelay.
func untilWhole(r layerResult, q int64) int64 {
	if !r.Allowed {
		return max(1, ceilSeconds(r.RetryAfter))
	}
	left := r.ResetAfter
	if l, s := r.limit, shapeOf(r.limit.Algorithm); s.refills {
		ahead := time.Duration(float64(int64(l.Capacity())-q) * unitTime(l)) // the queue that leaves room for q
		if s.queues && l.MaxDelay > 0 {
			ahead = min(ahead, l.MaxDelay-leakySlack(l)-time.Duration(float64(q-1)*unitTime(l)))
		}
		left -= ahead
	}
	return max(0, ceilSeconds(left))
}

// MarshalText names the built-in styles of h; a style of your own has no
// text form, and is an error.
func (h Headers) MarshalText() ([]byte, error) {
	if len(h) == 0 {
		return []byte("none"), nil
	}
	names := make([]string, len(h))
	for i, s := range h {
		switch s := s.(type) {
		case XRateLimit:
			if s != (XRateLimit{}) {
				return nil, fmt.Errorf("httplimit: renamed X-RateLimit headers have no text form")
			}
			names[i] = "xratelimit"
		case IETF:
			names[i] = "ietf"
		case OpenAI:
			switch s.Unit {
			case "", "requests":
				names[i] = "openai"
			case "tokens":
				names[i] = "openai-tokens"
			default:
				return nil, fmt.Errorf("httplimit: OpenAI headers of unit %q have no text form", s.Unit)
			}
		default:
			return nil, fmt.Errorf("httplimit: header style %T has no text form", s)
		}
	}
	return []byte(strings.Join(names, ",")), nil
}

// UnmarshalText sets h from its text form (see Headers).
func (h *Headers) UnmarshalText(text []byte) error {
	out := Headers{}
	for name := range strings.SplitSeq(string(text), ",") {
		switch strings.TrimSpace(name) {
		case "xratelimit":
			out = append(out, XRateLimit{})
		case "ietf":
			out = append(out, IETF{})
		case "both":
			out = append(out, XRateLimit{}, IETF{})
		case "openai":
			out = append(out, OpenAI{})
		case "openai-tokens":
			out = append(out, OpenAI{Unit: "tokens"})
		case "none":
		default:
			return fmt.Errorf("httplimit: unknown header style %q, want xratelimit, ietf, both, openai, openai-tokens or none", name)
		}
	}
	*h = out
	return nil
}

// ceilSeconds is d in whole seconds, rounded up; it does not overflow for
// the longest durations (a local fallback's share of a yearly limit can
// saturate a time.Duration).
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
