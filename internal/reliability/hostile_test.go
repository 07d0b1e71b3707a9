package reliability

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
)

// request is an httplimit.Request from a peer with headers.
type request struct {
	remote string
	header map[string]string // canonical names
}

func (r request) Context() context.Context { return context.Background() }
func (r request) RemoteAddr() string       { return r.remote }
func (r request) Header(name string) []string {
	if v, ok := r.header[http.CanonicalHeaderKey(name)]; ok {
		return []string{v}
	}
	return nil
}
func (r request) Method() string { return http.MethodGet }
func (r request) Route() string  { return "/" }

func newPolicy(t *testing.T, cfg httplimit.Config) *httplimit.Policy {
	t.Helper()
	pol, err := httplimit.New(cfg)
	if err != nil {
		t.Fatalf("httplimit.New: %v", err)
	}
	return pol
}

// keysOf returns every key in the server's database.
func keysOf(t *testing.T, c *redis.Client) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestHugeAPIKeyHeader: a 64 KiB API key is admitted and limited like any
// other, but what reaches Redis is a short hash; two such keys differing
// in their last byte stay apart.
func TestHugeAPIKeyHeader(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	pol := newPolicy(t, httplimit.Config{
		Limiter: newLimiter(t, s.Client(t, nil), core.WithTimeout(patient)),
		Limit:   core.Limit{Algorithm: core.SlidingWindow, Rate: 3, Period: time.Minute},
		Key:     httplimit.KeyByHeader("X-Api-Key"),
	})
	huge := strings.Repeat("k", 64<<10)
	for _, v := range []string{huge + "1", huge + "2"} {
		r := request{remote: "192.0.2.1:1", header: map[string]string{"X-Api-Key": v}}
		for i := range 5 {
			d := serve(pol, r)
			if d.Err != nil {
				t.Fatalf("request %d with a 64 KiB key: %v", i, d.Err)
			}
			if got, want := d.Outcome, httplimit.OutcomeAllowed; i >= 3 {
				want = httplimit.OutcomeDenied
				if got != want {
					t.Errorf("request %d: %v, want %v", i, got, want)
				}
			} else if got != want {
				t.Errorf("request %d: %v, want %v", i, got, want)
			}
		}
	}
	keys := keysOf(t, admin)
	if len(keys) != 4 { // a sliding window's log and meta, per key
		t.Fatalf("Redis holds %d keys for two 64 KiB API keys, want 4", len(keys))
	}
	for _, k := range keys {
		if len(k) >= 200 {
			t.Errorf("Redis key of %d bytes for a 64 KiB header, want < 200: %.100q...", len(k), k)
		}
	}
	t.Logf("64 KiB API keys stored as %q and %q", keys[0], keys[1])
}

// hostileKeys try to inject a hash tag, collide with an escaped form or a
// hashed form, and carry bytes that are not text.
var hostileKeys = []string{
	"{", "}", "{}", "}{", "{{}}", "a{b}c", "{evil}", "x}{y",
	"%", "%7B", "%7D", "%25", "%%7B",
	"#", "#hash", "#" + strings.Repeat("A", 43),
	"\x00", "a\x00", "a\x00b", "\x00\x00",
	"\xff", "\xfe\xff", "\xc3\x28", "é",
	"ratelimit:{x}:sw", "x",
	strings.Repeat("{", 128), strings.Repeat("{", 129),
	strings.Repeat("\x00", 300), strings.Repeat("\x00", 301),
}

// TestHostileKeys: every hostile key has a quota of its own under every
// algorithm: no two share state, and each is limited exactly.
func TestHostileKeys(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(patient))
	ctx := context.Background()
	seen := map[string]bool{}
	for _, k := range hostileKeys {
		if seen[k] {
			t.Fatalf("hostileKeys lists %q twice", k)
		}
		seen[k] = true
	}
	for _, a := range algorithms {
		limit := core.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
		for round := range 5 {
			for _, k := range hostileKeys {
				res, err := lim.Allow(ctx, 1, limit.For(k))
				if err != nil {
					t.Fatalf("%v: Allow(%q): %v", a, k, err)
				}
				if want := round < limit.Rate; res.Allowed != want {
					t.Errorf("%v: Allow(%q) in round %d: allowed %v, want %v (remaining %d): keys share state",
						a, k, round, res.Allowed, want, res.Remaining)
				}
			}
		}
	}
	// Through a Policy keyed by a header, hostile values stay apart too.
	pol := newPolicy(t, httplimit.Config{Limiter: lim, Key: httplimit.KeyByHeader("X-Api-Key"),
		Limit: core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Hour}})
	for round := range 3 {
		for _, k := range hostileKeys {
			d := serve(pol, request{remote: "192.0.2.1:1", header: map[string]string{"X-Api-Key": k}})
			want := httplimit.OutcomeAllowed
			if round >= 2 {
				want = httplimit.OutcomeDenied
			}
			if d.Err != nil || d.Outcome != want {
				t.Errorf("Policy, X-Api-Key %q, round %d: %v (%v), want %v", k, round, d.Outcome, d.Err, want)
			}
		}
	}
	// One key per hostile key and algorithm (two for the sliding window's
	// log and meta), and one per key through the Policy.
	{
		want := int64(len(hostileKeys) * (len(algorithms) + 2))
		if n, err := admin.DBSize(ctx).Result(); err != nil || n != want {
			t.Errorf("DBSIZE = %d, %v; want %d", n, err, want)
		}
	}
	if _, err := lim.Allow(ctx, 1, core.PerMinute(1).For("")); !errors.Is(err, core.ErrEmptyKey) {
		t.Errorf("Allow with an empty key: %v, want core.ErrEmptyKey", err)
	}
}

// TestManyDistinctKeysExpire: thousands of new keys per second for a few
// seconds, every algorithm, 1 s periods. Every key has a TTL, and once the
// load stops and the TTLs pass, DBSIZE is back to 0: memory is bounded by
// the TTLs, not by how many keys an attacker can invent.
func TestManyDistinctKeysExpire(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	// The test is about memory, not latency: a long timeout, so that a
	// saturated 2-core machine does not turn into errors.
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(2*patient))
	ctx := context.Background()
	const run = 3 * time.Second
	var calls atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				a := algorithms[i%len(algorithms)]
				limit := core.Limit{Algorithm: a, Rate: 10, Period: time.Second}
				if _, err := lim.Allow(ctx, 1, limit.For(fmt.Sprintf("attacker:%d:%d", g, i))); err != nil {
					t.Errorf("Allow: %v", err)
					return
				}
				calls.Add(1)
			}
		}()
	}
	wg.Wait()
	perSecond := float64(calls.Load()) / run.Seconds()
	size, _ := admin.DBSize(ctx).Result()
	t.Logf("%d distinct keys in %v (%.0f per second); DBSIZE %d when the load stopped", calls.Load(), run, perSecond, size)
	if perSecond < 1000 {
		t.Errorf("%.0f new keys per second, want >= 1000 for this test to mean anything", perSecond)
	}

	// Every key has a TTL of at most a few periods.
	for range 200 {
		k, err := admin.RandomKey(ctx).Result()
		if err == redis.Nil {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := admin.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// -2: expired since RANDOMKEY; -1 would mean no TTL.
		if ttl == -1 || ttl > 3*time.Second {
			t.Errorf("key %q has TTL %v, want one of at most 3s", k, ttl)
		}
	}

	stopped := time.Now()
	eventually(t, 30*time.Second, "DBSIZE returns to 0 after the TTLs", func() bool {
		n, err := admin.DBSize(ctx).Result()
		return err == nil && n == 0
	})
	t.Logf("DBSIZE 0 again %v after the load stopped", time.Since(stopped).Round(10*time.Millisecond))
}

// TestSpoofedForwardedForFromUntrustedPeer: an untrusted peer that sends
// X-Forwarded-For, Forwarded or X-Real-IP is still limited by its own
// address; a trusted proxy's header is used, read from the right.
func TestSpoofedForwardedForFromUntrustedPeer(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	limit := core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour}
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(patient))
	for _, c := range []*httplimit.ClientIP{nil, {TrustedProxies: []string{"10.0.0.0/8"}}} {
		t.Run(fmt.Sprintf("trusted=%v", c != nil), func(t *testing.T) {
			if err := admin.FlushDB(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			var ci httplimit.ClientIP
			if c != nil {
				ci = *c
			}
			byIP, err := httplimit.KeyByIP(ci)
			if err != nil {
				t.Fatal(err)
			}
			pol := newPolicy(t, httplimit.Config{Limiter: lim, Limit: limit, Key: byIP})
			allowed := 0
			for i := range 30 {
				fake := fmt.Sprintf("198.51.100.%d", i)
				r := request{remote: "203.0.113.7:4242", header: map[string]string{
					"X-Forwarded-For": fake + ", 10.0.0.1",
					"Forwarded":       "for=" + fake,
					"X-Real-Ip":       fake,
				}}
				d := serve(pol, r)
				if d.Err != nil {
					t.Fatalf("request %d: %v", i, d.Err)
				}
				if d.Proceed() {
					allowed++
				}
			}
			if allowed != limit.Rate {
				t.Errorf("an untrusted peer with 30 spoofed addresses got %d requests through, want %d", allowed, limit.Rate)
			}
			keys := keysOf(t, admin)
			if len(keys) != 1 || !strings.Contains(keys[0], "203.0.113.7") {
				t.Errorf("Redis keys %q, want one key for the peer 203.0.113.7", keys)
			}
			if c == nil {
				return
			}
			// Through a trusted proxy, the client is the rightmost address
			// that is not a proxy, whatever the client wrote to its left.
			for i := range 3 {
				r := request{remote: "10.0.0.1:80", header: map[string]string{
					"X-Forwarded-For": fmt.Sprintf("6.6.6.%d, 192.0.2.9, 10.0.0.2", i),
				}}
				if d := serve(pol, r); d.Err != nil || !d.Proceed() {
					t.Errorf("request %d through a trusted proxy: %v, %v", i, d.Outcome, d.Err)
				}
			}
			keys = keysOf(t, admin)
			if len(keys) != 2 || !strings.Contains(strings.Join(keys, " "), "192.0.2.9") || strings.Contains(strings.Join(keys, " "), "6.6.6.") {
				t.Errorf("Redis keys %q, want the peer's and 192.0.2.9's only", keys)
			}
		})
	}
}

// TestInvalidCosts: negative, zero and huge costs are refused with
// ErrInvalidCost, write nothing, and a Policy never serves such a request,
// even when it fails open, unless it is a dry run.
func TestInvalidCosts(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(patient))
	ctx := context.Background()
	limit := core.Limit{Rate: 10, Period: time.Minute}
	costs := []int{math.MinInt, -1_000_000, -1, 0, 11, 1 << 40, math.MaxInt}
	for _, a := range algorithms {
		for _, n := range costs {
			if _, err := lim.Allow(ctx, n, with(limit, a).For("k")); !errors.Is(err, core.ErrInvalidCost) {
				t.Errorf("%v: Allow(n=%d): %v, want core.ErrInvalidCost", a, n, err)
			}
		}
		if _, err := lim.Allow(ctx, -1, with(limit, a).For("k"), with(limit, a).For("k")); !errors.Is(err, core.ErrInvalidCost) {
			t.Errorf("%v: Allow(n=-1) under two Rules: %v, want core.ErrInvalidCost", a, err)
		}
	}
	for _, failClosed := range []bool{false, true} {
		for _, dry := range []bool{false, true} {
			for _, n := range costs {
				pol := newPolicy(t, httplimit.Config{Limiter: lim, Limit: limit, FailClosed: failClosed, DryRun: dry,
					Cost: func(httplimit.Request) int { return n }})
				d := serve(pol, request{remote: "192.0.2.1:1"})
				// A dry run enforces nothing, by design: it reports the
				// refusal (outcome and error) but serves the request, so a
				// buggy cost function cannot break traffic during a rollout.
				if d.Proceed() != dry || d.Outcome != httplimit.OutcomeFailedClosed || !errors.Is(d.Err, core.ErrInvalidCost) {
					t.Errorf("fail closed %v, dry run %v, cost %d: Proceed() = %v, outcome %v, err %v; want failed_closed with core.ErrInvalidCost, served only in a dry run",
						failClosed, dry, n, d.Proceed(), d.Outcome, d.Err)
				}
			}
		}
	}
	if n, _ := admin.DBSize(ctx).Result(); n != 0 {
		t.Errorf("invalid costs wrote %d keys, want 0", n)
	}
}

// TestOverflowingLimits: a Limit whose arithmetic would leave the exact
// range of Redis' Lua numbers is refused with ErrInvalidLimit and an error
// that names the problem, everywhere: Validate, Allow, httplimit.New, and a
// Policy's LimitFunc (which then never serves the request).
func TestOverflowingLimits(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	lim := newLimiter(t, s.Client(t, nil), core.WithTimeout(patient))
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		limit core.Limit
		want  string // in the error
	}{
		{"1e12 per nanosecond", core.Limit{Rate: 1e12, Period: time.Nanosecond}, "Period"},
		// Rate and Burst stop at 2^40 (about 1.1e12) and Period at 2^46µs
		// (about 2.2 years), so that every sum the scripts make is exact.
		{"1e15 per hour, token bucket", core.Limit{Rate: 1e15, Period: time.Hour}, "Rate"},
		{"1e15 per hour, sliding window", core.Limit{Algorithm: core.SlidingWindow, Rate: 1e15, Period: time.Hour}, "Rate"},
		{"1e15 per hour, fixed window", core.Limit{Algorithm: core.FixedWindow, Rate: 1e15, Period: time.Hour}, "Rate"},
		{"2e12 per second, window counter", core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 2e12, Period: time.Second}, "Rate"},
		{"MaxInt per hour", core.Limit{Rate: math.MaxInt, Period: time.Hour}, "Rate"},
		{"burst MaxInt", core.Limit{Rate: 10, Burst: math.MaxInt, Period: time.Second}, "Burst"},
		{"1 per 292 years", core.Limit{Rate: 1, Period: math.MaxInt64}, "Period"},
		{"leaky, 1e15 per day", core.Limit{Algorithm: core.LeakyBucket, Rate: 1e15, Period: 24 * time.Hour}, "Rate"},
		{"negative rate", core.Limit{Rate: -1, Period: time.Second}, "Rate"},
		{"negative burst", core.Limit{Rate: 1, Burst: -1, Period: time.Second}, "Burst"},
		{"unknown algorithm", core.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, "Algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limit.Validate()
			if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate(%+v) = %v, want core.ErrInvalidLimit naming %q", tc.limit, err, tc.want)
			}
			t.Logf("%v", err)
			if _, err := lim.Allow(ctx, 1, tc.limit.For("k")); !errors.Is(err, core.ErrInvalidLimit) {
				t.Errorf("Allow: %v, want core.ErrInvalidLimit", err)
			}
			if _, err := httplimit.New(httplimit.Config{Limiter: lim, Limit: tc.limit}); !errors.Is(err, core.ErrInvalidLimit) {
				t.Errorf("httplimit.New: %v, want core.ErrInvalidLimit", err)
			}
			pol := newPolicy(t, httplimit.Config{Limiter: lim, Limit: core.PerSecond(1),
				LimitFunc: func(httplimit.Request, string) (core.Limit, bool) { return tc.limit, true }})
			if d := serve(pol, request{remote: "192.0.2.1:1"}); d.Proceed() || !errors.Is(d.Err, core.ErrInvalidLimit) {
				t.Errorf("Policy with the Limit from LimitFunc: Proceed() = %v, outcome %v, err %v; want a refusal", d.Proceed(), d.Outcome, d.Err)
			}
		})
	}
	if n, _ := admin.DBSize(ctx).Result(); n != 0 {
		t.Errorf("invalid limits wrote %d keys, want 0", n)
	}
	// Large limits inside the range still work, exactly.
	for _, l := range []core.Limit{
		{Rate: 1e12, Period: time.Hour},
		{Algorithm: core.LeakyBucket, Rate: 1e12, Period: time.Hour},
	} {
		key := "huge-" + l.Algorithm.String()
		if res, err := lim.Allow(ctx, l.Rate, l.For(key)); err != nil || !res.Allowed || res.Granted != l.Rate {
			t.Errorf("%v 1e12 per hour, Allow(1e12) on a fresh key: %+v, %v; want admitted", l.Algorithm, res, err)
		}
		// A tenth of an hour's worth takes about 6 minutes to refill.
		res, err := lim.Allow(ctx, l.Rate/10, l.For(key))
		if err != nil || res.Allowed || res.RetryAfter < 5*time.Minute || res.RetryAfter > 7*time.Minute {
			t.Errorf("%v 1e12 per hour, Allow(1e11) right after: %+v, %v; want denied, RetryAfter about 6m", l.Algorithm, res, err)
		}
	}
	for _, l := range []core.Limit{
		{Rate: 1e9, Period: time.Second},
		{Rate: 1e6, Period: time.Hour},
		{Algorithm: core.SlidingWindowCounter, Rate: 1e6, Period: time.Hour},
		{Algorithm: core.SlidingWindowCounter, Rate: 1e12, Period: time.Second},
		{Algorithm: core.FixedWindow, Rate: 1e9, Period: 365 * 24 * time.Hour},
		{Algorithm: core.SlidingWindow, Rate: 1e9, Period: 365 * 24 * time.Hour},
		{Rate: 1, Period: 365 * 24 * time.Hour},
	} {
		if res, err := lim.Allow(ctx, 1, l.For("big")); err != nil || !res.Allowed {
			t.Errorf("Allow with %+v: %+v, %v; want admitted", l, res, err)
		}
	}
}

// serve decides r under p as a middleware does, its handler answering 200
// at once.
func serve(p *httplimit.Policy, r httplimit.Request) httplimit.Decision {
	return p.Serve(r, http.Header{}, func(context.Context, bool) int { return http.StatusOK })
}
