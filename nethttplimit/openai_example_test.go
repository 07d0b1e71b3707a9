package nethttplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
)

// An OpenAI-compatible gateway: requests and tokens per client per minute,
// at most 2 completions of a client streaming at once, and the headers
// OpenAI's clients read. Each completion reserves an estimate of 500
// tokens before it starts, streams, and reports what it really used once
// the stream is done; the difference is settled after the response. The
// fields of a response are written before its stream, so they show the
// estimate: the next response shows the settled figure.
func Example_streamingCompletion() {
	limiter, done := exampleLimiter()
	defer done()

	requests, err := httplimit.New(httplimit.Config{
		Limiter:  limiter,
		Name:     "requests",
		Limit:    core.PerMinute(60),
		InFlight: 2, // completions streaming at once, per client, on every instance
		Headers:  httplimit.Headers{httplimit.OpenAI{}},
	})
	if err != nil {
		panic(err)
	}
	tokens, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Name:    "tokens",
		Limit:   core.PerMinute(2000),
		Cost:    func(httplimit.Request) int { return 500 }, // the estimate
		Settle:  true,
		Headers: httplimit.Headers{httplimit.OpenAI{Unit: "tokens"}},
	})
	if err != nil {
		panic(err)
	}
	completions := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := 0
		for _, chunk := range []string{"Once", " upon", " a", " time"} {
			_, _ = fmt.Fprintf(w, "data: %q\n\n", chunk)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			used += 450 // ... the model's usage, as it streams
		}
		tokens.ReportCost(r.Context(), used) // 1800 tokens, settled once this returns
	})
	handler := nethttplimit.New(requests)(nethttplimit.New(tokens)(completions))

	for range 2 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", nil))
		h := rec.Header()
		fmt.Printf("%d requests: %s of %s, tokens: %s of %s, reset-tokens: %s, Retry-After: %q\n", rec.Code,
			h.Get("x-ratelimit-remaining-requests"), h.Get("x-ratelimit-limit-requests"),
			h.Get("x-ratelimit-remaining-tokens"), h.Get("x-ratelimit-limit-tokens"),
			h.Get("x-ratelimit-reset-tokens"), h.Get("Retry-After"))
	}
	// Output:
	// 200 requests: 59 of 60, tokens: 1500 of 2000, reset-tokens: 15s, Retry-After: ""
	// 429 requests: 58 of 60, tokens: 200 of 2000, reset-tokens: 54s, Retry-After: "9"
}
