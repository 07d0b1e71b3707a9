package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// lastDecision is an Observer that keeps the last Decision.
type lastDecision struct {
	mu sync.Mutex
	d  httplimit.Decision
}

func (o *lastDecision) Observe(d httplimit.Decision) {
	o.mu.Lock()
	o.d = d
	o.mu.Unlock()
}

func (o *lastDecision) get() httplimit.Decision {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.d
}

// failure is one way a decision fails, set up on a Limiter of its own, and
// how every layer must report it: core's error, httplimit's Outcome (failing
// open and closed) and RedisFault, the HTTP status nethttplimit
// answers with and the code grpclimit's call ends with.
type failure struct {
	name    string
	limiter func(t *testing.T) *core.Limiter
	cfg     func(*httplimit.Config) // what the Policy gets wrong, if anything
	key     string                  // core's key ("" for the empty key)
	cost    int
	limit   core.Limit
	is      error // what core's error matches
	fault   bool  // a Redis fault: the fail policy applies
	noKey   bool  // refused as unkeyable rather than undecided
}

func failures() []failure {
	healthy := func(t *testing.T) *core.Limiter { return newMini(t, timeout).limiter }
	valid := core.PerMinute(100)
	return []failure{
		{name: "empty key", limiter: healthy, key: "", cost: 1, limit: valid, is: core.ErrEmptyKey, noKey: true,
			cfg: func(c *httplimit.Config) { c.Key = func(httplimit.Request) (string, error) { return "", nil } }},
		{name: "invalid cost", limiter: healthy, key: "k", cost: 0, limit: valid, is: core.ErrInvalidCost,
			cfg: func(c *httplimit.Config) { c.Cost = func(httplimit.Request) int { return 0 } }},
		{name: "invalid limit", limiter: healthy, key: "k", cost: 1, limit: core.Limit{Rate: -1, Period: time.Second}, is: core.ErrInvalidLimit,
			cfg: func(c *httplimit.Config) {
				c.LimitFunc = func(httplimit.Request, string) (core.Limit, bool) {
					return core.Limit{Rate: -1, Period: time.Second}, true
				}
			}},
		{name: "closed Limiter", key: "k", cost: 1, limit: valid, is: core.ErrClosed, limiter: func(t *testing.T) *core.Limiter {
			l := healthy(t)
			_ = l.Close()
			return l
		}},
		{name: "connection refused", key: "k", cost: 1, limit: valid, is: core.ErrUnavailable, fault: true, limiter: func(t *testing.T) *core.Limiter {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			_ = ln.Close() // nothing listens there now
			rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			return newLimiter(t, rdb, time.Second)
		}},
		{name: "timeout", key: "k", cost: 1, limit: valid, is: context.DeadlineExceeded, fault: true, limiter: func(t *testing.T) *core.Limiter {
			_, rdb := redistest.Mini(t)
			rdb.AddHook(stallScripts{})
			return newLimiter(t, rdb, 30*time.Millisecond)
		}},
	}
}

func newLimiter(t *testing.T, rdb redis.UniversalClient, timeout time.Duration) *core.Limiter {
	t.Helper()
	l, err := core.New(rdb, core.WithTimeout(timeout), core.WithLogger(nil), core.WithBreaker(0, 0), core.WithLocalFallback(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestErrorsReportedAlike: a closed Limiter, an empty key, an invalid cost
// or Limit, and a Redis fault are each reported one way by every layer:
// core's error matches core.ErrUnavailable only for the Redis faults;
// httplimit applies the fail policy to those alone (RedisFault true),
// refuses the rest with failed_closed (no_key for the empty key) whatever
// the policy; nethttplimit answers the Outcome's status and grpclimit its
// code, on a server and through the client interceptor.
// Guards: "ErrClosed ... is the caller's mistake, not a Redis fault ... a
// fail policy does not apply" (core.ErrClosed's godoc) and "Any other
// error is refused with 503, whatever Fail says" (httplimit.Config.Fail):
// fails without them (a closed Limiter failed open as a Redis fault; a
// Redis timeout was DeadlineExceeded through the client interceptor).
func TestErrorsReportedAlike(t *testing.T) {
	for _, f := range failures() {
		for _, failClosed := range []bool{false, true} {
			t.Run(f.name+"/"+map[bool]string{false: "open", true: "closed"}[failClosed], func(t *testing.T) {
				l := f.limiter(t)
				_, err := l.Allow(context.Background(), f.cost, f.limit.For(f.key))
				if !errors.Is(err, f.is) || errors.Is(err, core.ErrUnavailable) != f.fault {
					t.Errorf("core: %v; want it to match %v, and core.ErrUnavailable: %v", err, f.is, f.fault)
				}

				outcome, status, code := httplimit.OutcomeFailedClosed, http.StatusServiceUnavailable, codes.Unavailable
				switch {
				case f.noKey:
					outcome, status, code = httplimit.OutcomeNoKey, http.StatusBadRequest, codes.InvalidArgument
				case f.fault && !failClosed:
					outcome, status, code = httplimit.OutcomeFailedOpen, http.StatusOK, codes.OK
				}
				obs := &lastDecision{}
				cfg := httplimit.Config{Limiter: l, Limit: valid(), FailClosed: failClosed, Observers: []httplimit.Observer{obs}, Key: httplimit.KeyByHeader("X-Key")}
				if f.cfg != nil {
					f.cfg(&cfg)
				}
				p, err := httplimit.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				decided := func(layer string) {
					t.Helper()
					if d := obs.get(); d.Outcome != outcome || observe.RedisFault(d.Degraded) != f.fault {
						t.Errorf("%s: %v, RedisFault %v (%v); want %v, %v", layer, d.Outcome, observe.RedisFault(d.Degraded), d.Err, outcome, f.fault)
					}
				}

				mw := nethttplimit.New(p)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.Header.Set("X-Key", "k")
				mw.ServeHTTP(rec, req)
				if rec.Code != status {
					t.Errorf("nethttplimit: status %d, want %d", rec.Code, status)
				}
				decided("nethttplimit")

				s := serve(t, nil, grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(p)))
				if a := check(t, s.client(peerA), "", "x-key", "k"); a.code != code {
					t.Errorf("grpclimit server: %v, want %v", a, code)
				}
				decided("grpclimit")

				if f.key == "" || f.cost != 1 || f.limit.Validate() != nil {
					return // the client interceptor refuses these at start-up
				}
				c, _ := countedClient(t, l, f.key, f.limit)
				want := codes.Unavailable // it fails closed: an upstream's quota
				if a := callWithin(c, 10*time.Second); a.code != want {
					t.Errorf("grpclimit client: %v, want %v", a, want)
				}
			})
		}
	}
}

func valid() core.Limit { return core.PerMinute(100) }
