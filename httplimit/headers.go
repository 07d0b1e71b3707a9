package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderStyle writes one style of rate-limit response fields for a
// decision the Limiter made (allowed or denied), through set, which every
// framework has in this shape (http.Header.Set, gin's c.Header, fiber's
// c.Set). Retry-After is not a style: every refused response carries it.
type HeaderStyle interface {
	WriteHeaders(set func(name, value string), d *Decision)
}

// Headers are the styles a Policy writes, in order. Its text form names
// the built-in styles, comma-separated: "xratelimit", "ietf",
// "xratelimit,ietf" (or "both"), and "none" for an empty list, so Headers
// can come from a flag (flag.TextVar) or a config file.
type Headers []HeaderStyle

// XRateLimit is the X-RateLimit-* style, as GitHub sends it: the capacity,
// what remains, and the Unix epoch second at which the quota is whole
// again, rounded up (some peers send seconds from now instead; the IETF
// style's t is that). Its fields rename the headers; "" keeps the default.
type XRateLimit struct {
	Limit     string // Default: "X-RateLimit-Limit"
	Remaining string // Default: "X-RateLimit-Remaining"
	Reset     string // Default: "X-RateLimit-Reset"
}

// WriteHeaders writes the three fields, for the layer the Decision reports.
func (x XRateLimit) WriteHeaders(set func(name, value string), d *Decision) {
	r := d.Result
	set(or(x.Limit, "X-Ratelimit-Limit"), strconv.Itoa(d.capacity))
	set(or(x.Remaining, "X-Ratelimit-Remaining"), strconv.Itoa(r.Remaining))
	reset := (d.now.UnixNano() + int64(r.ResetAfter) + int64(time.Second) - 1) / int64(time.Second)
	set(or(x.Reset, "X-Ratelimit-Reset"), strconv.FormatInt(reset, 10))
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

// IETF is the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers: one list member per policy, named
// by the Policy's name ("http"), or one per layer ("http-0", "http-1", and
// "http-global" for the global ceiling). q is the quota (the capacity), w
// its window in seconds, r what remains, and t the seconds until it is
// whole again; on a refused response t is the same point in time as
// Retry-After, as the draft asks, for each layer that refused.
type IETF struct{}

// WriteHeaders writes RateLimit-Policy and RateLimit.
func (IETF) WriteHeaders(set func(name, value string), d *Decision) {
	var polBuf, stateBuf [128]byte
	pol, state := polBuf[:0], stateBuf[:0]
	name := d.policy.quotedName[:len(d.policy.quotedName)-1] // without its closing quote
	// member appends one list member: the policy's name, then "-<layer>"
	// for layer >= 0, "-global" for layer -2, nothing for -1.
	member := func(layer int, r layerResult) {
		if len(pol) > 0 {
			pol, state = append(pol, ", "...), append(state, ", "...)
		}
		for _, b := range [2]*[]byte{&pol, &state} {
			*b = append(*b, name...)
			switch {
			case layer >= 0:
				*b = strconv.AppendInt(append(*b, '-'), int64(layer), 10)
			case layer == -2:
				*b = append(*b, "-global"...)
			}
			*b = append(*b, '"')
		}
		pol = strconv.AppendInt(append(pol, ";q="...), int64(r.capacity), 10)
		pol = strconv.AppendInt(append(pol, ";w="...), max(1, ceilSeconds(r.period)), 10)
		t := ceilSeconds(r.ResetAfter)
		if !r.Allowed {
			t = max(1, ceilSeconds(r.RetryAfter))
		}
		state = strconv.AppendInt(append(state, ";r="...), int64(r.Remaining), 10)
		state = strconv.AppendInt(append(state, ";t="...), t, 10)
	}
	if len(d.extra) == 0 && !d.askedGlobal {
		member(-1, d.main)
	} else {
		d.eachLayer(func(i int, r layerResult) { member(i, r) })
		if d.askedGlobal {
			member(-2, d.global)
		}
	}
	// Canonical forms of RateLimit-Policy and RateLimit (see XRateLimit).
	set("Ratelimit-Policy", string(pol))
	set("Ratelimit", string(state))
}

// MarshalText names the built-in styles of h; a style of your own has no
// text form, and is an error.
func (h Headers) MarshalText() ([]byte, error) {
	if len(h) == 0 {
		return []byte("none"), nil
	}
	names := make([]string, len(h))
	for i, s := range h {
		switch s.(type) {
		case XRateLimit:
			if s != (XRateLimit{}) {
				return nil, fmt.Errorf("httplimit: renamed X-RateLimit headers have no text form")
			}
			names[i] = "xratelimit"
		case IETF:
			names[i] = "ietf"
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
		case "none":
		default:
			return fmt.Errorf("httplimit: unknown header style %q, want xratelimit, ietf, both or none", name)
		}
	}
	*h = out
	return nil
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
