package conformance

import (
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// Scenario is one behaviour, as the steps a client takes and what it must
// get back, the same through every adapter.
type Scenario struct {
	Name string
	// Configs are the middlewares of the scenario, each on an app of its
	// own, where a Step names the one it goes through; with Stack, all on
	// one app, in order, in front of the same routes.
	Configs []Config
	Stack   bool
	Steps   []Step
	// Keys are the keys Redis must have seen, as "<policy name>:<key>";
	// "/items/:id" stands for the adapter's ItemsPattern, "{route}" for its
	// RoutePrefix. Not checked when a step stops Redis.
	Keys []string
}

// Step is one request and what it must get.
type Step struct {
	// Handler is the index in Configs of the middleware to go through.
	Handler int
	// Method defaults to GET, Path to "/", Remote (the peer address) to
	// 192.0.2.1:1234.
	Method, Path, Remote string
	Header               map[string]string
	// Timeout, if set, ends the request's context after it.
	Timeout time.Duration
	// StopRedis stops Redis before the request.
	StopRedis bool
	Want      Want
}

// Want is a step's expected response.
type Want struct {
	Status int
	Body   string
	// ContentType, if set, must match exactly.
	ContentType string
	// Header holds the expected value of each rate-limit header (Any for
	// present with any value), except X-RateLimit-Reset; the others of
	// limitHeaders must be absent.
	Header map[string]string
	// ResetIn is the time until the quota is whole again: X-RateLimit-Reset
	// must be now+ResetIn in epoch seconds, rounded up. 0 means the header
	// must be absent; AnyReset that it is present.
	ResetIn time.Duration
	// Event is the outcome the Observer must be told ("allowed", ...), ""
	// for none (a skipped request), several comma-separated for several
	// decisions (stacked Policies, a request inside a request).
	Event string
	// MinTook and MaxTook (if > 0) bound how long the round trip takes.
	MinTook, MaxTook time.Duration
}

// Any matches any value of a header that must be present.
const Any = "*"

// AnyReset, as Want.ResetIn, accepts any X-RateLimit-Reset that is present.
const AnyReset = time.Duration(-1)

const (
	ok          = "ok"
	jsonType    = "application/json"
	unavailable = "{\"error\":\"rate limiter unavailable\"}\n"
	canceled    = "{\"error\":\"request canceled\"}\n"
	noKey       = "{\"error\":\"missing rate limit key\"}\n"
	peer        = "ip:192.0.2.1"
	// slack is what a loaded machine may add to a bound on a round trip.
	slack = time.Second
)

func denied(retryAfter int) string {
	return `{"error":"rate limit exceeded","retry_after":` + strconv.Itoa(retryAfter) + "}\n"
}

// xrl is the X-RateLimit set without Reset (see Want.ResetIn), plus extras.
func xrl(limit, remaining string, extra ...string) map[string]string {
	return hdr(append([]string{"X-RateLimit-Limit", limit, "X-RateLimit-Remaining", remaining}, extra...)...)
}

func hdr(kv ...string) map[string]string {
	m := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func allowed(limit, remaining string, resetIn time.Duration) Want {
	return Want{Status: 200, Body: ok, Header: xrl(limit, remaining), ResetIn: resetIn, Event: "allowed"}
}

func deniedWant(limit string, retryAfter int, resetIn time.Duration) Want {
	return Want{Status: 429, Body: denied(retryAfter), ContentType: jsonType,
		Header:  xrl(limit, "0", "Retry-After", strconv.Itoa(retryAfter)),
		ResetIn: resetIn, Event: "denied"}
}

func one(c Config) []Config { return []Config{c} }

// cfg is a Config of c and no framework hooks.
func cfg(c httplimit.Config) Config { return Config{Config: c} }

func perMinute(n int) core.Limit { return core.PerMinute(n) }

// byIP keys by the client IP, with the given ClientIP.
func byIP(c httplimit.ClientIP) httplimit.KeyFunc {
	k, err := httplimit.KeyByIP(c)
	if err != nil {
		panic(err) // the table's own ClientIPs are valid
	}
	return k
}

var (
	trusted     = []string{"10.0.0.0/8"}
	defaultIP   = byIP(httplimit.ClientIP{})
	apiKeyOrIP  = httplimit.KeyFirst(httplimit.KeyByHeader("X-API-Key"), defaultIP)
	onlyHeaders = httplimit.Headers{}
)

func costHeader(r Req) int {
	n, err := strconv.Atoi(r.Header("X-Cost"))
	if err != nil {
		return 1
	}
	return n
}

// Scenarios is the table every adapter runs.
var Scenarios = []Scenario{
	{
		Name:    "allowed_sends_x_ratelimit",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3)})),
		Steps:   []Step{{Want: allowed("3", "2", 20*time.Second)}},
		Keys:    []string{"http:" + peer},
	},
	{
		Name:    "default_limit_is_10_per_second",
		Configs: one(cfg(httplimit.Config{})),
		Steps:   []Step{{Want: allowed("10", "9", 100*time.Millisecond)}},
		Keys:    []string{"http:" + peer},
	},
	{
		Name:    "denied_429_retry_after_json",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(2)})),
		Steps: []Step{
			{Want: allowed("2", "1", 30*time.Second)},
			{Want: allowed("2", "0", time.Minute)},
			{Want: deniedWant("2", 30, time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// A refused response's t is its Retry-After (30), not the time
		// until the quota is whole (60).
		Name:    "headers_ietf",
		Configs: one(cfg(httplimit.Config{Name: "api", Limit: perMinute(2), Headers: httplimit.Headers{httplimit.IETF{}}})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "allowed",
				Header: hdr("RateLimit-Policy", `"api";q=2;w=60`, "RateLimit", `"api";r=1;t=30`)}},
			{Want: Want{Status: 200, Body: ok, Event: "allowed",
				Header: hdr("RateLimit-Policy", `"api";q=2;w=60`, "RateLimit", `"api";r=0;t=60`)}},
			{Want: Want{Status: 429, Body: denied(30), ContentType: jsonType, Event: "denied",
				Header: hdr("RateLimit-Policy", `"api";q=2;w=60`, "RateLimit", `"api";r=0;t=30`, "Retry-After", "30")}},
		},
		Keys: []string{"api:" + peer},
	},
	{
		// RateLimit-Policy states the rate a client may keep to, never
		// refused (issue 17): a bucket of 10/s with a burst of 100 is
		// q=10 per second, not its burst; r is capped at q.
		Name: "headers_ietf_sustained_rate",
		Configs: one(cfg(httplimit.Config{Name: "api", Limit: core.Limit{Rate: 10, Period: time.Second, Burst: 100},
			Headers: httplimit.Headers{httplimit.IETF{}}})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "allowed",
				Header: hdr("RateLimit-Policy", `"api";q=10;w=1`, "RateLimit", `"api";r=10;t=0`)}},
		},
		Keys: []string{"api:" + peer},
	},
	{
		// A sliding window counter's w covers the two windows its estimate
		// reads, so t never exceeds w (t itself depends on where in its
		// window the real clock is; httplimit's property tests check it).
		Name: "headers_ietf_counter_window",
		Configs: one(cfg(httplimit.Config{Name: "api", Limit: core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 10, Period: 10 * time.Second},
			Headers: httplimit.Headers{httplimit.IETF{}}})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "allowed",
				Header: hdr("RateLimit-Policy", `"api";q=10;w=20`, "RateLimit", Any)}},
		},
		Keys: []string{"api:" + peer},
	},
	{
		Name:    "headers_both",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(2), Headers: httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "allowed", ResetIn: 30 * time.Second,
				Header: xrl("2", "1", "RateLimit-Policy", `"http";q=2;w=60`, "RateLimit", `"http";r=1;t=30`)}},
			{Want: allowedBoth()},
			{Want: Want{Status: 429, Body: denied(30), ContentType: jsonType, Event: "denied", ResetIn: time.Minute,
				Header: xrl("2", "0", "RateLimit-Policy", `"http";q=2;w=60`, "RateLimit", `"http";r=0;t=30`, "Retry-After", "30")}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name:    "headers_none",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), Headers: onlyHeaders})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "allowed"}},
			{Want: Want{Status: 429, Body: denied(60), ContentType: jsonType, Event: "denied", Header: hdr("Retry-After", "60")}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name:    "spoofed_forwarding_headers_ignored_from_untrusted_peer",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3)})),
		Steps: []Step{
			{Header: hdr("X-Forwarded-For", "203.0.113.7"), Want: allowed("3", "2", 20*time.Second)},
			{Header: hdr("X-Real-IP", "203.0.113.8"), Want: allowed("3", "1", 40*time.Second)},
			{Header: hdr("Forwarded", "for=203.0.113.9"), Want: allowed("3", "0", time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name:    "trusted_proxy_honoured_right_to_left",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), Key: byIP(httplimit.ClientIP{TrustedProxies: trusted})})),
		Steps: []Step{
			{Remote: "10.0.0.1:5000", Header: hdr("X-Forwarded-For", "198.51.100.9, 203.0.113.7, 10.0.0.2"),
				Want: allowed("3", "2", 20*time.Second)},
			// The proxy added its own line after the client's forged one.
			{Remote: "10.0.0.1:5000", Header: hdr("X-Forwarded-For", "198.51.100.9\n203.0.113.7"),
				Want: allowed("3", "1", 40*time.Second)},
			// Headers the proxy does not set are the client's: ignored.
			{Remote: "10.0.0.3:5000", Header: hdr("X-Real-IP", "198.51.100.9", "Forwarded", "for=198.51.100.9"),
				Want: allowed("3", "2", 20*time.Second)},
			// Not a trusted peer: its X-Forwarded-For proves nothing.
			{Header: hdr("X-Forwarded-For", "203.0.113.7"), Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:ip:203.0.113.7", "http:ip:10.0.0.3", "http:" + peer},
	},
	{
		Name: "trusted_proxy_forwarded_header",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3),
			Key: byIP(httplimit.ClientIP{TrustedProxies: trusted, Header: "Forwarded"})})),
		Steps: []Step{
			{Remote: "10.0.0.1:5000", Header: hdr("Forwarded", `for=198.51.100.9, for="203.0.113.7:4711";proto=https`,
				"X-Forwarded-For", "198.51.100.9"),
				Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:ip:203.0.113.7"},
	},
	{
		Name:    "ipv6_grouped_by_64",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3)})),
		Steps: []Step{
			{Remote: "[2001:db8::1]:1000", Want: allowed("3", "2", 20*time.Second)},
			{Remote: "[2001:db8::ffff:1]:1001", Want: allowed("3", "1", 40*time.Second)},
			{Remote: "[2001:db8:0:1::1]:1002", Want: allowed("3", "2", 20*time.Second)},
			// IPv4-mapped IPv6 is the IPv4 client.
			{Remote: "[::ffff:192.0.2.1]:1003", Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:ip:2001:db8::/64", "http:ip:2001:db8:0:1::/64", "http:" + peer},
	},
	{
		Name:    "header_key_with_ip_fallback",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), Key: apiKeyOrIP})),
		Steps: []Step{
			{Header: hdr("X-API-Key", "k1"), Want: allowed("3", "2", 20*time.Second)},
			{Header: hdr("X-API-Key", "k1"), Remote: "198.51.100.1:1", Want: allowed("3", "1", 40*time.Second)},
			{Want: allowed("3", "2", 20*time.Second)},
			{Header: hdr("x-api-key", "k2"), Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:h:X-Api-Key:k1", "http:h:X-Api-Key:k2", "http:" + peer},
	},
	{
		// Leaving the header out must not be a way around the limit.
		Name:    "header_key_missing_refused",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), Key: httplimit.KeyByHeader("X-API-Key")})),
		Steps: []Step{
			{Want: Want{Status: 400, Body: noKey, ContentType: jsonType, Event: "no_key"}},
			{Want: Want{Status: 400, Body: noKey, ContentType: jsonType, Event: "no_key"}},
			{Header: hdr("X-API-Key", "k1"), Want: allowed("1", "0", time.Minute)},
		},
		Keys: []string{"http:h:X-Api-Key:k1"},
	},
	{
		// A flood without the key, failing open, with Redis up: not one of
		// them is served, and none reaches Redis.
		Name:    "no_key_flood_refused",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), Key: httplimit.KeyByHeader("X-API-Key")})),
		Steps: func() []Step {
			steps := make([]Step, 40)
			for i := range steps {
				steps[i] = Step{Remote: "198.51.100." + strconv.Itoa(i) + ":1",
					Want: Want{Status: 400, Body: noKey, ContentType: jsonType, Event: "no_key"}}
			}
			return steps
		}(),
		Keys: []string{},
	},
	{
		Name: "header_key_missing_served_when_opted_in",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), Key: httplimit.KeyByHeader("X-API-Key"),
			ServeUnkeyed: true})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Event: "no_key"}},
			{Want: Want{Status: 200, Body: ok, Event: "no_key"}},
		},
		Keys: []string{},
	},
	{
		Name: "framework_key_func",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(1)}, KeyFunc: func(r Req) (string, error) {
			if u := r.Header("X-User"); u != "" {
				return "user:" + u, nil
			}
			return "", nil // no user: no key
		}}),
		Steps: []Step{
			{Header: hdr("X-User", "alice"), Want: allowed("1", "0", time.Minute)},
			{Header: hdr("X-User", "alice"), Remote: "198.51.100.1:1", Want: deniedWant("1", 60, time.Minute)},
			{Header: hdr("X-User", "bob"), Want: allowed("1", "0", time.Minute)},
			{Want: Want{Status: 400, Body: noKey, ContentType: jsonType, Event: "no_key"}},
		},
		Keys: []string{"http:user:alice", "http:user:bob"},
	},
	{
		Name:    "route_key_uses_pattern",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), Key: httplimit.KeyByRoute()})),
		Steps: []Step{
			{Path: "/items/1", Want: allowed("3", "2", 20*time.Second)},
			{Path: "/items/2", Remote: "198.51.100.1:1", Want: allowed("3", "1", 40*time.Second)},
			{Path: "/", Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:route:{route}/items/:id", "http:route:{route}/"},
	},
	{
		// HEAD runs the GET route's handler: one limit for both, whatever
		// the method.
		Name:    "route_key_shared_by_methods",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(2), Key: httplimit.KeyByRoute()})),
		Steps: []Step{
			{Want: allowed("2", "1", 30*time.Second)},
			{Method: http.MethodHead, Want: Want{Status: 200, Body: ok, Header: xrl("2", "0"), ResetIn: time.Minute, Event: "allowed"}},
			{Want: deniedWant("2", 30, time.Minute)},
		},
		Keys: []string{"http:route:{route}/"},
	},
	{
		// A route registered for every method is one handler: the method
		// a client picks multiplies nothing (issue 17: a method-less
		// route ran 45 times at 5 per minute).
		Name:    "route_key_shared_by_any_method",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), Key: httplimit.KeyByRoute()})),
		Steps: []Step{
			{Path: "/any", Want: allowed("3", "2", 20*time.Second)},
			{Method: http.MethodPost, Path: "/any", Want: allowed("3", "1", 40*time.Second)},
			{Method: http.MethodDelete, Path: "/any", Want: allowed("3", "0", time.Minute)},
			{Method: http.MethodPut, Path: "/any", Want: deniedWant("3", 20, time.Minute)},
			{Method: http.MethodPatch, Path: "/any", Want: deniedWant("3", 20, time.Minute)},
		},
		Keys: []string{"http:route:/any"},
	},
	{
		Name:    "route_and_ip_joined",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), Key: httplimit.KeyJoin(defaultIP, httplimit.KeyByRoute())})),
		Steps: []Step{
			{Path: "/items/1", Want: allowed("3", "2", 20*time.Second)},
			{Path: "/items/2", Want: allowed("3", "1", 40*time.Second)},
			{Path: "/", Want: allowed("3", "2", 20*time.Second)},
			{Path: "/items/3", Remote: "198.51.100.1:1", Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:" + peer + "|route:{route}/items/:id", "http:" + peer + "|route:{route}/",
			"http:ip:198.51.100.1|route:{route}/items/:id"},
	},
	{
		Name: "skip",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(1)}, Skip: func(r Req) bool {
			return r.Path == "/healthz"
		}}),
		Steps: []Step{
			{Path: "/healthz", Want: Want{Status: 200, Body: ok}},
			{Path: "/healthz", Want: Want{Status: 200, Body: ok}},
			{Want: allowed("1", "0", time.Minute)},
			{Path: "/healthz", Want: Want{Status: 200, Body: ok}},
			{Want: deniedWant("1", 60, time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name:    "cost",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(5)}, Cost: costHeader}),
		Steps: []Step{
			{Header: hdr("X-Cost", "3"), Want: allowed("5", "2", 36*time.Second)},
			// 2 left, 3 asked: one more unit refills in 12s.
			{Header: hdr("X-Cost", "3"), Want: Want{Status: 429, Body: denied(12), ContentType: jsonType,
				Header: xrl("5", "2", "Retry-After", "12"), ResetIn: 36 * time.Second, Event: "denied"}},
			{Header: hdr("X-Cost", "2"), Want: allowed("5", "0", time.Minute)},
			// A cost above the capacity can never pass: a caller error,
			// answered closed whatever the fail policy.
			{Header: hdr("X-Cost", "6"), Want: Want{Status: 503, Body: unavailable, ContentType: jsonType,
				Header: hdr("Retry-After", "1"), Event: "failed_closed"}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name: "per_route_limit",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(3), Key: httplimit.KeyByRoute()},
			LimitFunc: func(r Req) (core.Limit, bool) { return perMinute(1), r.Path == "/search" }}),
		Steps: []Step{
			{Path: "/search", Want: allowed("1", "0", time.Minute)},
			{Path: "/search", Want: deniedWant("1", 60, time.Minute)},
			{Path: "/", Want: allowed("3", "2", 20*time.Second)},
		},
		Keys: []string{"http:route:{route}/search", "http:route:{route}/"},
	},
	{
		Name: "per_tenant_limit",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(2), Key: apiKeyOrIP},
			LimitFunc: func(r Req) (core.Limit, bool) { return perMinute(10), r.Header("X-Plan") == "paid" }}),
		Steps: []Step{
			{Header: hdr("X-API-Key", "k1", "X-Plan", "paid"), Want: allowed("10", "9", 6*time.Second)},
			{Header: hdr("X-API-Key", "k2"), Want: allowed("2", "1", 30*time.Second)},
		},
		Keys: []string{"http:h:X-Api-Key:k1", "http:h:X-Api-Key:k2"},
	},
	{
		Name:    "dry_run_never_denies",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), DryRun: true})),
		Steps: []Step{
			{Want: allowed("1", "0", time.Minute)},
			{Want: Want{Status: 200, Body: ok, Header: xrl("1", "0"), ResetIn: time.Minute, Event: "denied"}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name: "custom_deny_handler",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(1)}, Deny: func(_ Req, d httplimit.Decision) (int, string) {
			return 429, "slow down; retry in " + strconv.FormatInt(d.RetryAfter(), 10) + "s"
		}}),
		Steps: []Step{
			{Want: allowed("1", "0", time.Minute)},
			{Want: Want{Status: 429, Body: "slow down; retry in 60s", ContentType: "text/plain; charset=utf-8",
				Header: xrl("1", "0", "Retry-After", "60"), ResetIn: time.Minute, Event: "denied"}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// Only the failed logins (401) count: a success gives its unit back.
		Name:    "count_failed_only",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(2), CountIf: countFailed})),
		Steps: []Step{
			{Want: allowed("2", "1", 30*time.Second)},
			{Want: allowed("2", "1", 30*time.Second)},
			{Path: "/login", Want: Want{Status: 401, Body: "bad password", Header: xrl("2", "1"), ResetIn: 30 * time.Second, Event: "allowed"}},
			{Path: "/login", Want: Want{Status: 401, Body: "bad password", Header: xrl("2", "0"), ResetIn: time.Minute, Event: "allowed"}},
			{Want: deniedWant("2", 30, time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// From inside a handler: a limit on what the request holds.
		Name: "check_inside_handler",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(100)},
			Check: &httplimit.Config{Name: "bytes", Limit: perMinute(1000)}}),
		Steps: []Step{
			{Path: "/upload", Header: hdr("X-Cost", "600"), Want: Want{Status: 200, Body: "stored",
				Header: xrl("1000", "400"), ResetIn: 36 * time.Second, Event: "allowed"}},
			{Path: "/upload", Header: hdr("X-Cost", "600"), Want: Want{Status: 429, Body: denied(12), ContentType: jsonType,
				Header: xrl("1000", "400", "Retry-After", "12"), ResetIn: 36 * time.Second, Event: "denied"}},
		},
		Keys: []string{"bytes:" + peer},
	},
	{
		// After a successful login, say: the key's quota is whole again.
		Name:    "reset_inside_handler",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1)})),
		Steps: []Step{
			{Want: allowed("1", "0", time.Minute)},
			{Want: deniedWant("1", 60, time.Minute)},
			{Path: "/reset", Want: Want{Status: 204}},
			{Want: allowed("1", "0", time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name:    "fail_open_redis_stopped",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3)})),
		Steps: []Step{
			{Want: allowed("3", "2", 20*time.Second)},
			{StopRedis: true, Want: Want{Status: 200, Body: ok, Event: "failed_open", MaxTook: StopTimeout + slack}},
		},
	},
	{
		Name:    "fail_closed_redis_stopped",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(3), FailClosed: true})),
		Steps: []Step{
			{StopRedis: true, Want: Want{Status: 503, Body: unavailable, ContentType: jsonType,
				Header: hdr("Retry-After", "1"), Event: "failed_closed", MaxTook: StopTimeout + slack}},
		},
	},
	{
		// 1 per 2s: requests leave two seconds apart.
		Name: "leaky_bucket_waits_and_honours_cancel",
		Configs: one(cfg(httplimit.Config{Limit: core.Limit{Algorithm: core.LeakyBucket, Rate: 1, Period: 2 * time.Second, Burst: 5},
			MaxWait: 10 * time.Second})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Header: xrl("5", Any), ResetIn: AnyReset, Event: "allowed", MaxTook: slack}},
			{Want: Want{Status: 200, Body: ok, Header: xrl("5", Any), ResetIn: AnyReset, Event: "allowed", MinTook: 1500 * time.Millisecond}},
			// The client gives up after 500ms (ample for Redis to answer on
			// a loaded machine) of a wait of two seconds or more.
			{Timeout: 500 * time.Millisecond, Want: Want{Status: 499, Body: canceled, ContentType: jsonType,
				Header: hdr(), Event: "canceled", MaxTook: 1500 * time.Millisecond}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// One per 10s, held at most 1s: the second request would wait 10s.
		Name: "leaky_bucket_max_wait",
		Configs: one(cfg(httplimit.Config{Limit: core.Limit{Algorithm: core.LeakyBucket, Rate: 1, Period: 10 * time.Second, Burst: 5},
			MaxWait: time.Second})),
		Steps: []Step{
			{Want: Want{Status: 200, Body: ok, Header: xrl("5", Any), ResetIn: AnyReset, Event: "allowed", MaxTook: slack}},
			{Want: Want{Status: 429, Body: denied(9), ContentType: jsonType, Header: xrl("5", Any, "Retry-After", "9"),
				ResetIn: AnyReset, Event: "denied", MaxTook: slack}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		Name: "two_policies_do_not_share_counters",
		Configs: []Config{
			cfg(httplimit.Config{Name: "a", Limit: perMinute(1)}),
			cfg(httplimit.Config{Name: "b", Limit: perMinute(1)}),
		},
		Steps: []Step{
			{Handler: 0, Want: allowed("1", "0", time.Minute)},
			{Handler: 0, Want: deniedWant("1", 60, time.Minute)},
			{Handler: 1, Want: allowed("1", "0", time.Minute)},
		},
		Keys: []string{"a:" + peer, "b:" + peer},
	},
}

// hookAfterKey is a Cost and a LimitFunc hook that fail the request (a
// panic answers 500) if the Policy calls it for a request it cannot key.
func hookAfterKey(r Req) bool {
	if r.Header("X-API-Key") == "" {
		panic("conformance: a hook ran before the request was keyed")
	}
	return false
}

// Scenarios2 are the scenarios of stacked Policies, keys a client cannot
// vary, hooks, refunds under every algorithm, requests in flight and costs
// settled after the response.
var scenarios2 = []Scenario{
	{
		// Over HTTP/2 a field value keeps the spaces and tabs HTTP/1.1
		// strips; either way it is one key. Further lines are ignored.
		Name:    "header_key_is_the_field_value",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(1), Key: httplimit.KeyByHeader("X-API-Key")})),
		Steps: []Step{
			{Header: hdr("X-API-Key", "K"), Want: allowed("1", "0", time.Minute)},
			{Header: hdr("X-API-Key", " K\t"), Want: deniedWant("1", 60, time.Minute)},
			{Header: hdr("X-API-Key", "K \nother"), Want: deniedWant("1", 60, time.Minute)},
		},
		Keys: []string{"http:h:X-Api-Key:K"},
	},
	{
		// A request that cannot be keyed reaches no hook of the app's.
		Name: "no_key_calls_no_hook",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(1), Key: httplimit.KeyByHeader("X-API-Key")},
			Cost:      func(r Req) int { hookAfterKey(r); return 1 },
			LimitFunc: func(r Req) (core.Limit, bool) { return core.Limit{}, hookAfterKey(r) }}),
		Steps: []Step{
			{Want: Want{Status: 400, Body: noKey, ContentType: jsonType, Event: "no_key"}},
			{Header: hdr("X-API-Key", "k1"), Want: allowed("1", "0", time.Minute)},
		},
		Keys: []string{"http:h:X-Api-Key:k1"},
	},
	{
		// A Limit from LimitFunc that is a sliding window gives a
		// successful login's unit back, as every algorithm does.
		Name: "count_failed_with_limit_func_sliding_window",
		Configs: one(Config{Config: httplimit.Config{Limit: perMinute(100), CountIf: countFailed},
			LimitFunc: func(Req) (core.Limit, bool) {
				return core.Limit{Algorithm: core.SlidingWindow, Rate: 1, Period: time.Minute}, true
			}}),
		Steps: []Step{
			{Want: allowed("1", "0", time.Minute)},
			{Want: allowed("1", "0", time.Minute)},
			{Path: "/login", Want: Want{Status: 401, Body: "bad password", Header: xrl("1", "0"), ResetIn: time.Minute, Event: "allowed"}},
			{Want: deniedWant("1", 60, time.Minute)},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// Two Policies on one route: the IETF fields list both, the
		// X-RateLimit ones describe the one with the least left, and the
		// one that refuses says how long.
		Name:  "stacked_policies_compose",
		Stack: true,
		Configs: []Config{
			cfg(httplimit.Config{Name: "ip", Limit: perMinute(3), Headers: httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}}),
			cfg(httplimit.Config{Name: "key", Limit: perMinute(2), Key: httplimit.KeyByHeader("X-API-Key"),
				Headers: httplimit.Headers{httplimit.XRateLimit{}, httplimit.IETF{}}}),
		},
		Steps: []Step{
			{Header: hdr("X-API-Key", "k1"), Want: Want{Status: 200, Body: ok, Event: "allowed,allowed", ResetIn: 30 * time.Second,
				Header: xrl("2", "1", "RateLimit-Policy", `"ip";q=3;w=60, "key";q=2;w=60`,
					"RateLimit", `"ip";r=2;t=20, "key";r=1;t=30`)}},
			{Header: hdr("X-API-Key", "k1"), Want: Want{Status: 200, Body: ok, Event: "allowed,allowed", ResetIn: time.Minute,
				Header: xrl("2", "0", "RateLimit-Policy", `"ip";q=3;w=60, "key";q=2;w=60`,
					"RateLimit", `"ip";r=1;t=40, "key";r=0;t=60`)}},
			{Header: hdr("X-API-Key", "k1"), Want: Want{Status: 429, Body: denied(30), ContentType: jsonType, Event: "allowed,denied",
				ResetIn: time.Minute, Header: xrl("2", "0", "Retry-After", "30", "RateLimit-Policy", `"ip";q=3;w=60, "key";q=2;w=60`,
					"RateLimit", `"ip";r=0;t=60, "key";r=0;t=30`)}},
		},
		Keys: []string{"ip:" + peer, "key:h:X-Api-Key:k1"},
	},
	{
		// One request in flight per client: a request made while another
		// holds the permit is refused; once that one ends, the next passes.
		Name:    "in_flight_limit",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(100), InFlight: 1})),
		Steps: []Step{
			{Path: "/inside", Want: Want{Status: 200, Body: "inside: 429 1", Header: xrl("100", "99"), ResetIn: AnyReset,
				Event: "allowed,in_flight"}},
			{Want: Want{Status: 200, Body: ok, Header: xrl("100", "98"), ResetIn: AnyReset, Event: "allowed"}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// docs/http.md "Requests in flight": "It gives the permit back when its
		// handler returns (a panic included)." The handler panics holding
		// the only permit; the next request gets it. Without the adapter's
		// deferred Finish, it would be refused for its permit (in_flight)
		// for the whole InFlightLease.
		Name:    "in_flight_permit_back_after_panic",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(100), InFlight: 1})),
		Steps: []Step{
			{Path: "/panic", Want: Want{Status: 500, Body: "panicked", Header: xrl("100", "99"), ResetIn: AnyReset, Event: "allowed"}},
			{Want: Want{Status: 200, Body: ok, Header: xrl("100", "98"), ResetIn: AnyReset, Event: "allowed"}},
		},
		Keys: []string{"http:" + peer},
	},
	{
		// docs/http.md "Costs known after the response": ReportCost "returns
		// false when there is nothing to settle: ... took nothing for the
		// request (it failed open)". With Redis up it returns true ("ok").
		Name:    "settle_report_cost_false_after_failing_open",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(10), Settle: true})),
		Steps: []Step{
			{Path: "/spend", Header: hdr("X-Used", "1"), Want: allowed("10", "9", 6*time.Second)},
			{StopRedis: true, Path: "/spend", Header: hdr("X-Used", "1"),
				Want: Want{Status: 200, Body: "unsettled", Event: "failed_open", MaxTook: StopTimeout + slack}},
		},
	},
	{
		// A request that reports it cost 15 of 10 per minute runs the key
		// 5 into debt: the next waits for 6 units, 36s.
		Name:    "settle_cost_after_response",
		Configs: one(cfg(httplimit.Config{Limit: perMinute(10), Settle: true})),
		Steps: []Step{
			{Path: "/spend", Header: hdr("X-Used", "15"), Want: allowed("10", "9", 6*time.Second)},
			{Want: Want{Status: 429, Body: denied(36), ContentType: jsonType, Event: "denied", ResetIn: 90 * time.Second,
				Header: xrl("10", "0", "Retry-After", "36")}},
		},
		Keys: []string{"http:" + peer},
	},
}

func init() { Scenarios = append(Scenarios, scenarios2...) }

func allowedBoth() Want {
	return Want{Status: 200, Body: ok, Event: "allowed", ResetIn: time.Minute,
		Header: xrl("2", "0", "RateLimit-Policy", `"http";q=2;w=60`, "RateLimit", `"http";r=0;t=60`)}
}

func (sc Scenario) stops() bool {
	for _, st := range sc.Steps {
		if st.StopRedis {
			return true
		}
	}
	return false
}

// countFailed counts the requests that failed: failed logins, say.
func countFailed(status int) bool { return status >= 400 }
