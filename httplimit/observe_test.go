package httplimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestDecisionOf: the Decision an Observer gets of a call made outside a
// Policy, for each verb and each way a call ends.
func TestDecisionOf(t *testing.T) {
	tb := core.PerMinute(10).For("k")
	hour := core.PerHour(100).For("k")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	fault := fmt.Errorf("core: redis: %w", core.ErrUnavailable)
	tests := []struct {
		name    string
		ctx     context.Context
		o       core.Observation
		decides bool
		outcome Outcome
		by      string     // RefusedBy
		limit   core.Limit // reported
		near    bool
		fault   bool // RedisFault
	}{
		{"allowed", nil, core.Observation{Verb: "allow", Name: "outbound", Rules: []core.Rule{tb}, Result: core.Result{Allowed: true, Granted: 1, Remaining: 3}}, true, OutcomeAllowed, "", tb.Limit, false, false},
		{"allowed, near the limit", nil, core.Observation{Verb: "allow_at_most", Rules: []core.Rule{tb}, Result: core.Result{Allowed: true, Granted: 1, Remaining: 2}}, true, OutcomeAllowed, "", tb.Limit, true, false},
		{"denied", nil, core.Observation{Verb: "allow", Rules: []core.Rule{tb}, Result: core.Result{RetryAfter: time.Second}}, true, OutcomeDenied, "0", tb.Limit, false, false},
		{"a Wait's deadline too near", nil, core.Observation{Verb: "wait", Rules: []core.Rule{tb}, Result: core.Result{RetryAfter: time.Second}, Err: fmt.Errorf("%w: too late", core.ErrWaitExceedsDeadline)}, true, OutcomeDenied, "0", tb.Limit, false, false},
		{"a Redis fault", nil, core.Observation{Verb: "wait", Rules: []core.Rule{tb}, Err: fault}, true, OutcomeFailedClosed, "", tb.Limit, false, true},
		{"an invalid cost", nil, core.Observation{Verb: "allow", Rules: []core.Rule{tb}, Err: core.ErrInvalidCost}, true, OutcomeFailedClosed, "", tb.Limit, false, false},
		{"the caller gave up", canceled, core.Observation{Verb: "wait", Rules: []core.Rule{tb}, Err: context.Canceled}, true, OutcomeCanceled, "", tb.Limit, false, false},
		{"the second Rule refused", nil, core.Observation{Verb: "allow", Rules: []core.Rule{tb, hour},
			Result: core.Result{RetryAfter: time.Minute, Rules: []core.Result{{Allowed: true, Remaining: 9}, {RetryAfter: time.Minute}}}}, true, OutcomeDenied, "1", hour.Limit, false, false},
		{"the second Rule has the fewest left", nil, core.Observation{Verb: "allow", Rules: []core.Rule{tb, hour},
			Result: core.Result{Allowed: true, Granted: 1, Remaining: 15, Rules: []core.Result{{Allowed: true, Remaining: 20}, {Allowed: true, Remaining: 15}}}}, true, OutcomeAllowed, "", hour.Limit, true, false},
		{"a peek", nil, core.Observation{Verb: "peek", Rules: []core.Rule{tb}}, false, 0, "", core.Limit{}, false, false},
		{"a refund", nil, core.Observation{Verb: "refund", Rules: []core.Rule{tb}, Err: fault}, false, 0, "", core.Limit{}, false, false},
		{"a settle", nil, core.Observation{Verb: "settle", Rules: []core.Rule{tb}}, false, 0, "", core.Limit{}, false, false},
		{"a renewal", nil, core.Observation{Verb: "renew", Rules: []core.Rule{tb}}, false, 0, "", core.Limit{}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			d, ok := decisionOf(ctx, tt.o)
			if ok != tt.decides {
				t.Fatalf("DecisionOf: %v, want %v", ok, tt.decides)
			}
			if !ok {
				return
			}
			if d.Outcome != tt.outcome || d.RefusedBy != tt.by || d.Limit != tt.limit || d.nearLimit() != tt.near ||
				d.redisFault() != tt.fault || observe.RedisFault(d.Degraded) != tt.fault || d.Policy != tt.o.Name || d.context() != ctx || d.Err != tt.o.Err {
				t.Errorf("Decision %+v (near %v, fault %v); want outcome %v, refused by %q, limit %v, near %v, fault %v",
					d, d.nearLimit(), d.redisFault(), tt.outcome, tt.by, tt.limit, tt.near, tt.fault)
			}
		})
	}
}

// TestPolicyObservers: a Policy tells each of its Observers of each
// decision, in order, and its calls are not told again to the Limiter's
// observers (core.Limiter.Observe), whose calls made directly still are.
// Config.Observer took one Observer; two needed a fan-out of the user's.
func TestPolicyObservers(t *testing.T) {
	_, _, l := mini(t)
	var direct []core.Observation
	stop := l.Observe(func(_ context.Context, o core.Observation) { direct = append(direct, o) })
	defer stop()
	var first, second observed
	var order []string
	p := mustNew(t, Config{Limiter: l, Name: "api", Limit: core.PerMinute(2),
		Observers: []Observer{&first, orderedObserver{&order, "a"}, &second, orderedObserver{&order, "b"}}})
	for range 3 {
		decide(p, from("192.0.2.1"))
	}
	if len(first.decisions) != 3 || len(second.decisions) != 3 || strings.Join(order, "") != "ababab" {
		t.Errorf("Observers told %d and %d times, in the order %q; want 3 each, in order", len(first.decisions), len(second.decisions), order)
	}
	if len(direct) != 0 {
		t.Errorf("the Limiter's observers told of a Policy's calls: %+v", direct)
	}
	if _, err := l.Allow(context.Background(), 1, core.PerMinute(2).For("direct")); err != nil {
		t.Fatal(err)
	}
	if len(direct) != 1 {
		t.Errorf("a direct call: told %d times, want once", len(direct))
	}
	if _, err := New(Config{Limiter: l, Observers: []Observer{&first, nil}}); err == nil || !strings.Contains(err.Error(), "Observers[1] is nil") {
		t.Errorf("New with a nil Observer: %v, want an error naming Observers[1]", err)
	}
}

type orderedObserver struct {
	order *[]string
	name  string
}

func (o orderedObserver) Observe(Decision) { *o.order = append(*o.order, o.name) }

// TestDegraded walks the ways a decision is made without Redis, under
// both fail policies: each gets one reason in Decision.Degraded (what the
// metrics count by), and a decision Redis made, or a caller's mistake,
// none. Before it, the breaker's decisions were counted nowhere apart.
func TestDegraded(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		failed := map[bool]string{false: "fail_open", true: "fail_closed"}[failClosed]
		// FailClosed refuses what the fallback decided.
		byFallback := map[bool]string{false: "fallback", true: "fail_closed"}[failClosed]
		steps := []struct {
			name     string
			opts     []core.Option
			down     bool // miniredis closed
			cost     int
			want     []string // Degraded of each of the decisions, in turn
			outcomes []Outcome
		}{
			{"Redis decides", nil, false, 1, []string{"", ""}, nil},
			{"a cost that can never pass", nil, false, 1000, []string{""}, []Outcome{OutcomeFailedClosed}},
			{"Redis down", nil, true, 1, []string{failed, failed}, nil},
			{"Redis down, then the circuit open", []core.Option{core.WithTimeout(0), core.WithBreaker(1, time.Hour)}, true, 1,
				[]string{failed, "breaker", "breaker"}, nil},
			{"Redis down, the fallback decides", []core.Option{core.WithLocalFallback(1, 100)}, true, 1, []string{byFallback, byFallback}, nil},
			{"the circuit open, the fallback decides", []core.Option{core.WithTimeout(0), core.WithBreaker(1, time.Hour), core.WithLocalFallback(1, 100)}, true, 1,
				[]string{byFallback, byFallback}, nil},
		}
		for _, st := range steps {
			t.Run(failed+"/"+st.name, func(t *testing.T) {
				mr, _ := redistest.Mini(t)
				rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1}) // a closed Redis fails at once
				t.Cleanup(func() { _ = rdb.Close() })
				l := newLimiter(t, rdb, st.opts...)
				if st.down {
					mr.Close()
				}
				var obs observed
				p := mustNew(t, Config{Limiter: l, Limit: core.PerMinute(10), FailClosed: failClosed, Observers: []Observer{&obs},
					Cost: func(Request) int { return st.cost }})
				for i, want := range st.want {
					d, _ := decide(p, from("192.0.2.1"))
					if d.Degraded != want || obs.decisions[i].Degraded != want {
						t.Errorf("decision %d: Degraded %q (the Observer's %q), want %q (outcome %v, err %v)", i, d.Degraded, obs.decisions[i].Degraded, want, d.Outcome, d.Err)
					}
					if i < len(st.outcomes) && d.Outcome != st.outcomes[i] {
						t.Errorf("decision %d: outcome %v, want %v", i, d.Outcome, st.outcomes[i])
					}
				}
			})
		}
	}
}
