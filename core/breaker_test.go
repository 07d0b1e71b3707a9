package core

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// records keeps "LEVEL message" for every log record.
type records struct {
	mu   sync.Mutex
	list []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Level.String()+" "+strings.TrimPrefix(rec.Message, "redlimit: "))
	return nil
}

func (r *records) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.list
	r.list = nil
	return list
}

func newTestBreaker(logs *records) *breaker {
	log := slog.New(logs)
	b := &breaker{failures: 5, cooldown: 500 * time.Millisecond, span: 100 * time.Millisecond, log: func() *slog.Logger { return log }}
	b.healthy.Store(true)
	return b
}

var errDown = errors.New("dial tcp 127.0.0.1:7006: connect: connection refused")

func wantRecords(t *testing.T, got []string, want ...string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("log records:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A Cluster with one dead master of three fails only the calls for that
// master's slots: failures and successes alternate. That is one outage, so
// it is logged once (and once more per failLogEvery), not per request, and
// it never opens the circuit for the healthy masters' keys.
func TestBreakerPartialOutageLogsOnce(t *testing.T) {
	ctx := context.Background()
	logs := &records{}
	b := newTestBreaker(logs)
	faults := 0
	b.onFault = func() { faults++ }
	now := time.Unix(1e9, 0)
	step := func(d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(time.Millisecond) {
			for _, err := range []error{errDown, nil, nil} {
				if !b.allow(now) {
					t.Fatalf("at %v the circuit is open: a partial outage must not open it", now)
				}
				b.record(ctx, err, now)
			}
		}
	}
	step(failLogEvery - time.Second)
	wantRecords(t, logs.take(), "WARN redis call failed", "INFO redis answers again")
	if want := int((failLogEvery - time.Second) / time.Millisecond); faults != want {
		t.Errorf("onFault ran %d times for %d failures", faults, want)
	}
	step(2 * time.Second)
	wantRecords(t, logs.take(), "WARN redis call failed", "INFO redis answers again")
}

// A short recovery inside failLogEvery hides the next failure record, but
// an outage that follows still shows: the circuit opening is logged, and so
// is the recovery after it.
func TestBreakerOutageAfterBlipIsLogged(t *testing.T) {
	ctx := context.Background()
	logs := &records{}
	b := newTestBreaker(logs)
	now := time.Unix(1e9, 0)
	b.record(ctx, errDown, now)
	b.record(ctx, nil, now.Add(time.Millisecond))
	wantRecords(t, logs.take(), "WARN redis call failed", "INFO redis answers again")

	now = now.Add(time.Second)
	for i := 0; b.allow(now); i++ {
		if i > 100 {
			t.Fatal("the circuit never opened")
		}
		b.record(ctx, errDown, now)
		now = now.Add(50 * time.Millisecond)
	}
	wantRecords(t, logs.take(), "WARN circuit open")

	now = now.Add(b.cooldown)
	if !b.allow(now) {
		t.Fatal("no probe after the cool-down")
	}
	b.record(ctx, nil, now)
	wantRecords(t, logs.take(), "INFO redis answers again")
}

// Failures of the caller's own making say nothing about Redis: no record,
// no slot-map reload.
func TestBreakerIgnoresCallerErrors(t *testing.T) {
	logs := &records{}
	b := newTestBreaker(logs)
	b.onFault = func() { t.Error("onFault ran for a caller error") }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	now := time.Unix(1e9, 0)
	b.record(ctx, context.Canceled, now)
	b.record(context.Background(), ErrInvalidCost, now)
	wantRecords(t, logs.take())
}

// A Cluster client learns of a promoted replica from the Limiter's failures
// (see New); other clients have no slot map to reload.
func TestNewReloadsClusterSlotsOnFaults(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	if opsNew(t, cluster).breaker.onFault == nil {
		t.Error("New(*redis.ClusterClient): no slot-map reload on faults")
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = single.Close() })
	if opsNew(t, single).breaker.onFault != nil {
		t.Error("New(*redis.Client): a reload hook on a client without slots")
	}
}

// TestDefaultLoggerReportsOutage: a Limiter pointed at a Redis that does
// not answer says so through slog.Default() unless told otherwise, so that
// failing open is never silent.
func TestDefaultLoggerReportsOutage(t *testing.T) {
	logs := &records{}
	saved := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(saved) })

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "k", PerSecond(1)); err == nil {
		t.Fatal("Allow on a dead Redis: no error")
	}
	found := false
	for _, r := range logs.take() {
		found = found || strings.HasPrefix(r, "WARN redis call failed")
	}
	if !found {
		t.Error("no \"redis call failed\" record through slog.Default()")
	}

	// WithLogger(nil) is the way out.
	quiet, err := New(rdb, WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	logs.take()
	if _, err := quiet.Allow(context.Background(), "k", PerSecond(1)); err == nil {
		t.Fatal("Allow on a dead Redis: no error")
	}
	for _, r := range logs.take() {
		if strings.HasPrefix(r, "WARN redis call failed") {
			t.Errorf("WithLogger(nil) still logs: %s", r)
		}
	}
}
