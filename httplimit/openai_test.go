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
		d := p.Decide(from("192.0.2.1"))
		d.WriteHeaders(h)
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
			d := p.Decide(from("192.0.2.7"))
			d.WriteHeaders(h)
		}
		if got := h.Get("x-ratelimit-limit-requests"); got != "5" {
			t.Errorf("order %s first: x-ratelimit-limit-requests = %q, want the strict Policy's 5", order[0].Name(), got)
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
