package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/redlimittest"
)

// An LLM API's budget of 2000 tokens per minute per client, where a
// completion's size is known only once it is done. Each request reserves
// an estimate (500 tokens) to be admitted at all; the handler reports what
// the completion used, and the Policy settles the difference when the
// handler returns: the unused part of the estimate is given back, and what
// exceeds it becomes a debt that later requests wait out at the Limit's
// rate.
func ExampleConfig_tokenBudget() {
	redis, done := exampleRedis()
	defer done()

	policy, err := httplimit.New(httplimit.Config{
		Limiter: redis.NewLimiter(),
		Name:    "tokens",
		Limit:   core.PerMinute(2000),                       // tokens, refilled continuously
		Cost:    func(httplimit.Request) int { return 500 }, // the estimate a request reserves
		Settle:  true,                                       // the handler reports the real cost
	})
	if err != nil {
		panic(err)
	}
	api := nethttplimit.New(policy)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used, _ := strconv.Atoi(r.URL.Query().Get("used")) // what the model says it used
		policy.ReportCost(r.Context(), used)               // settled once this handler returns
	}))
	complete := func(used string) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest("POST", "/complete?used="+used, nil))
		fmt.Printf("used %s: %d, Remaining %s", used, rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
		if s := rec.Header().Get("Retry-After"); s != "" {
			fmt.Printf(", Retry-After %s", s)
		}
		fmt.Println()
	}

	complete("200")  // reserves 500 of 2000, gives 300 back: 1800 left
	complete("2500") // reserves 500 of 1800, owes 2000 more: 700 in debt
	complete("100")  // needs 500, 1200 away: 36 s at 2000 per minute
	redis.Advance(36 * time.Second)
	complete("100") // reserves 500, gives 400 back
	// Output:
	// used 200: 200, Remaining 1500
	// used 2500: 200, Remaining 1300
	// used 100: 429, Remaining 0, Retry-After 36
	// used 100: 200, Remaining 0
}

// One completion at a time per client, across every instance, and its
// tokens counted once it is done: a request takes a permit with its unit
// of the rate limit, atomically, and gives it back when the handler
// returns. One made while another of the client's is in flight gets 429
// and Retry-After: 1, and takes nothing.
func ExampleConfig_inFlight() {
	redis, done := exampleRedis()
	defer done()

	policy, err := httplimit.New(httplimit.Config{
		Limiter:  redis.NewLimiter(),
		Name:     "completions",
		Limit:    core.PerMinute(2000), // tokens; a request reserves 1
		InFlight: 1,
		Settle:   true,
	})
	if err != nil {
		panic(err)
	}
	var api http.Handler
	api = nethttplimit.New(policy)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("meanwhile") {
			// The same client asks again while this completion runs.
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, httptest.NewRequest("POST", "/complete", nil))
			fmt.Print("meanwhile: ", rec.Code, " Retry-After ", rec.Header().Get("Retry-After"), " ", rec.Body.String())
		}
		policy.ReportCost(r.Context(), 800) // what the completion used
	}))

	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("POST", "/complete?meanwhile", nil))
	fmt.Println("first:", rec.Code, "Remaining", rec.Header().Get("X-RateLimit-Remaining"))
	rec = httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("POST", "/complete", nil))
	fmt.Println("next:", rec.Code, "Remaining", rec.Header().Get("X-RateLimit-Remaining"))
	// Output:
	// meanwhile: 429 Retry-After 1 {"error":"rate limit exceeded","retry_after":1}
	// first: 200 Remaining 1999
	// next: 200 Remaining 1199
}

// Limits per tenant that an operator changes at run time, without a
// deploy: core.Overrides keeps them in Redis, and every instance reads a
// tenant's at most once per max age (a second here). A request is keyed
// by its verified tenant first, so an invented API key reads nothing.
func ExampleConfig_overrides() {
	redis, done := exampleRedis()
	defer done()
	ctx := context.Background()

	overrides, err := core.NewOverrides(redis.Client(), "", time.Second)
	if err != nil {
		panic(err)
	}
	tenants := map[string]string{"key-1": "acme", "key-2": "initech"} // your API keys
	policy, err := httplimit.New(httplimit.Config{
		Limiter: redis.NewLimiter(),
		Limit:   core.PerMinute(2), // the default tier
		Key: func(r httplimit.Request) (string, error) {
			if keys := r.Header("X-API-Key"); len(keys) > 0 && tenants[keys[0]] != "" {
				return "tenant:" + tenants[keys[0]], nil
			}
			return "", errors.New("no valid API key") // 400, and nothing asked of Redis
		},
		LimitFunc: func(r httplimit.Request, key string) (core.Limit, bool) {
			l, found, _ := overrides.Get(r.Context(), key) // unreadable: the default tier
			return l, found
		},
	})
	if err != nil {
		panic(err)
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	// An operator raises acme (or SETs "ratelimit:override:{tenant:acme}"
	// to "100/min" by hand).
	if err := overrides.Set(ctx, "tenant:acme", core.PerMinute(100), 0); err != nil {
		panic(err)
	}
	for _, apiKey := range []string{"key-1", "key-2", "key-2", "key-2", "invented"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", apiKey)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(apiKey, rec.Code, rec.Header().Get("X-RateLimit-Limit"), rec.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// key-1 200 100 99
	// key-2 200 2 1
	// key-2 200 2 0
	// key-2 429 2 0
	// invented 400
}

// exampleRedis is an in-process Redis whose clock moves only when the
// example says so (redlimittest.Start). A test passes its *testing.T to
// Start; an example has none, so it passes a stand-in, and closes the
// Redis with done.
func exampleRedis() (redis *redlimittest.Redis, done func()) {
	t := &exampleT{}
	return redlimittest.Start(t), t.cleanup
}

// exampleT is what redlimittest asks of a testing.TB.
type exampleT struct {
	testing.TB // nil: only the methods below are called
	cleanups   []func()
}

func (*exampleT) Helper()                      {}
func (*exampleT) Logf(string, ...any)          {}
func (*exampleT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (t *exampleT) Cleanup(f func())           { t.cleanups = append(t.cleanups, f) }

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A user, their organisation and the whole API on one route: each request
// counts against all three, or, refused by one, against none (cat's
// refused request leaves cat 3 and everyone 996). The X-Org header keys
// the organisation; the IETF fields list each limit, and RefusedBy (and
// the metrics) name the one that refused.
func ExampleConfig_scopes() {
	redis, done := exampleRedis()
	defer done()

	policy, err := httplimit.New(httplimit.Config{
		Limiter: redis.NewLimiter(),
		Name:    "api",
		Key:     httplimit.KeyByHeader("X-User"),
		Limit:   core.PerMinute(3), // each user
		Scopes: []httplimit.Scope{
			{Name: "org", Key: httplimit.KeyByHeader("X-Org"), Limit: core.PerMinute(4)}, // each organisation
			{Name: "global", Limit: core.PerMinute(1000)},                                // everyone together
		},
		Headers: httplimit.Headers{httplimit.IETF{}},
	})
	if err != nil {
		panic(err)
	}
	api := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func(user, org string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-User", user)
		req.Header.Set("X-Org", org)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		fmt.Println(user, org, rec.Code, rec.Header().Get("RateLimit"))
	}
	call("ann", "acme")
	call("ann", "acme")
	call("bob", "acme")
	call("bob", "acme") // acme's 4th: the organisation's last unit
	call("cat", "acme") // refused by acme, counted nowhere
	call("cat", "initech")
	// Output:
	// ann acme 200 "api-0";r=2;t=20, "api-org";r=3;t=15, "api-global";r=999;t=1
	// ann acme 200 "api-0";r=1;t=40, "api-org";r=2;t=30, "api-global";r=998;t=1
	// bob acme 200 "api-0";r=2;t=20, "api-org";r=1;t=45, "api-global";r=997;t=1
	// bob acme 200 "api-0";r=1;t=40, "api-org";r=0;t=60, "api-global";r=996;t=1
	// cat acme 429 "api-0";r=3;t=0, "api-org";r=0;t=15, "api-global";r=996;t=1
	// cat initech 200 "api-0";r=2;t=20, "api-org";r=3;t=15, "api-global";r=995;t=1
}
