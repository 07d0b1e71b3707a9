package httplimit

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestOpenAIHeaders: a gateway's two Policies, one counting requests and
// one counting tokens, send OpenAI's six fields; the reset is a duration
// rounded up to the millisecond, never earlier than the quota is whole.
func TestOpenAIHeaders(t *testing.T) {
	_, _, l := mini(t)
	requests := mustNew(t, Config{Limiter: l, Name: "requests", Limit: core.PerMinute(3), Headers: Headers{OpenAI{}}})
	tokens := mustNew(t, Config{Limiter: l, Name: "tokens", Limit: core.PerMinute(1000), Headers: Headers{OpenAI{Unit: "tokens"}},
		Cost: func(Request) int { return 300 }})
	h := http.Header{}
	for _, p := range []*Policy{requests, tokens} {
		d := p.testDecide(from("192.0.2.1"))
		d.writeHeaders(h)
	}
	checkHeaders(t, "openai", h, map[string]string{
		"x-ratelimit-limit-requests":     "3",
		"x-ratelimit-remaining-requests": "2",
		"x-ratelimit-reset-requests":     "20s", // one request of 3 per minute refills in 20 s
		"x-ratelimit-limit-tokens":       "1000",
		"x-ratelimit-remaining-tokens":   "700",
		"x-ratelimit-reset-tokens":       "18s", // 300 tokens at 1000 per minute
		"X-RateLimit-Limit":              "",
	})
}

// TestOpenAIStrictestPolicy: two Policies of one unit on a route leave the
// fields of the one with the least remaining, whichever decides first.
func TestOpenAIStrictestPolicy(t *testing.T) {
	_, _, l := mini(t)
	loose := mustNew(t, Config{Limiter: l, Name: "loose", Limit: core.PerMinute(100), Headers: Headers{OpenAI{}}})
	strict := mustNew(t, Config{Limiter: l, Name: "strict", Limit: core.PerMinute(5), Headers: Headers{OpenAI{}}})
	for _, order := range [][]*Policy{{loose, strict}, {strict, loose}} {
		h := http.Header{}
		for _, p := range order {
			d := p.testDecide(from("192.0.2.7"))
			d.writeHeaders(h)
		}
		if got := h.Get("x-ratelimit-limit-requests"); got != "5" {
			t.Errorf("order %s first: x-ratelimit-limit-requests = %q, want the strict Policy's 5", order[0].name, got)
		}
	}
}

// TestCeilMillis: a reset is never rounded down, so a client that waits it
// out is never early.
func TestCeilMillis(t *testing.T) {
	for _, tt := range []struct{ in, want time.Duration }{
		{0, 0},
		{time.Nanosecond, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{1500*time.Microsecond + 1, 2 * time.Millisecond},
		{6 * time.Minute, 6 * time.Minute},
	} {
		if got := ceilMillis(tt.in); got != tt.want {
			t.Errorf("ceilMillis(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestOpenAIConfig: the style's text forms, and a Unit no header name can
// end in refused by New.
func TestOpenAIConfig(t *testing.T) {
	for text, want := range map[string]Headers{
		"openai":                          {OpenAI{}},
		"openai-tokens":                   {OpenAI{Unit: "tokens"}},
		"openai,openai-tokens,xratelimit": {OpenAI{}, OpenAI{Unit: "tokens"}, XRateLimit{}},
	} {
		var h Headers
		if err := h.UnmarshalText([]byte(text)); err != nil || fmt.Sprint(h) != fmt.Sprint(want) {
			t.Errorf("Headers.UnmarshalText(%q) = %v, %v; want %v", text, h, err, want)
		}
		if b, err := h.MarshalText(); err != nil || string(b) != text {
			t.Errorf("Headers(%v).MarshalText = %q, %v; want %q", h, b, err, text)
		}
	}
	if _, err := (Headers{OpenAI{Unit: "images"}}).MarshalText(); err == nil {
		t.Error(`OpenAI{Unit: "images"} marshaled to text`)
	}
	_, _, l := mini(t)
	if _, err := New(Config{Limiter: l, Headers: Headers{OpenAI{Unit: "to kens"}}}); err == nil {
		t.Error(`New with OpenAI{Unit: "to kens"}: no error`)
	}
}

// TestOpenAIRetryFields backs OpenAI's "retry-after-ms ... x-should-retry:
// false when that wait is above 60 s": a refusal for 20 s carries the
// milliseconds and may be retried; one for 30 min tells OpenAI's clients
// not to (the Node SDK retried early, twice a call), and an admitted
// request carries neither.
func TestOpenAIRetryFields(t *testing.T) {
	_, _, l := mini(t)
	minute := mustNew(t, Config{Limiter: l, Name: "minute", Limit: core.PerMinute(3), Headers: Headers{OpenAI{}}})
	hour := mustNew(t, Config{Limiter: l, Name: "hour", Limit: core.PerHour(2), Headers: Headers{OpenAI{}}})
	var h http.Header
	for range 4 {
		_, h = decide(minute, from("192.0.2.1"))
	}
	checkHeaders(t, "denied for 20s", h, map[string]string{"retry-after-ms": "20000", "x-should-retry": "", "Retry-After": "20"})
	for range 3 {
		_, h = decide(hour, from("192.0.2.1"))
	}
	checkHeaders(t, "denied for 30min", h, map[string]string{"retry-after-ms": "1800000", "x-should-retry": "false", "Retry-After": "1800"})
	_, h = decide(minute, from("192.0.2.2"))
	checkHeaders(t, "admitted", h, map[string]string{"retry-after-ms": "", "x-should-retry": ""})
}
