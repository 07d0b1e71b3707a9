package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
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
	if _, err := l.Allow(context.Background(), 1, PerSecond(1).For("k")); err == nil {
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
	if _, err := quiet.Allow(context.Background(), 1, PerSecond(1).For("k")); err == nil {
		t.Fatal("Allow on a dead Redis: no error")
	}
	for _, r := range logs.take() {
		if strings.HasPrefix(r, "WARN redis call failed") {
			t.Errorf("WithLogger(nil) still logs: %s", r)
		}
	}
}

// TestRequestErrorsLeaveTheBreakerClosed: errors that are one request's
// own (a state key of another type, a value redlimit did not write, a
// calendar Limit whose windows Redis' clock is far from) fail that request
// only: a run of them, longer than the default breaker's five failures,
// never opens the circuit for the other keys.
// Guards: "any other (a script's own error, ...) is the request's, and
// says nothing of the other keys" (redisFault's godoc).
func TestRequestErrorsLeaveTheBreakerClosed(t *testing.T) {
	ctx := context.Background()
	mr, rdb := redistest.Mini(t)
	l, err := New(rdb, WithPrefix("brk"), WithTimeout(time.Minute), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	l.breaker.span = 0 // the default breaker, its span of a cool-down not waited out
	lim := PerMinute(10)
	keyOf := func(key string) string {
		return stateKeys(nil, l.prefix, escapeTag(key), lim.row(), 0)[0]
	}
	if err := rdb.RPush(ctx, keyOf("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, keyOf("corrupt"), "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	daily := Limit{Algorithm: FixedWindow, Rate: 10, Calendar: Daily}
	for i := range 3 {
		mr.SetTime(time.Now().Add(100 * time.Hour)) // three days from the client's
		for _, tt := range []struct {
			key   string
			limit Limit
		}{{"list", lim}, {"corrupt", lim}, {"skewed", daily}, {"list", lim}, {"corrupt", lim}, {"skewed", daily}} {
			if _, err := l.Allow(ctx, 1, tt.limit.For(tt.key)); err == nil {
				t.Fatalf("round %d, %s: no error", i, tt.key)
			}
		}
		mr.SetTime(time.Now())
		if r, err := l.Allow(ctx, 1, lim.For(fmt.Sprintf("other%d", i))); err != nil || !r.Allowed {
			t.Fatalf("round %d: another key: %+v, %v; want admitted", i, r, err)
		}
	}
}

// replyError is an error reply as go-redis returns it (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestRedisFaultReplies: an error reply is Redis failing only when it says
// the server cannot serve now; a network error or a timeout always is.
func TestRedisFaultReplies(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{errDown, true},
		{context.DeadlineExceeded, true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		// Redis 6.2 wraps a script's error reply in its own.
		{replyError("ERR Error running script (call to f_369f9600): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'."), true},
		{replyError("ERR Error running script (call to f_369f9600): @user_script:1: @user_script: 1: -WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("BUSY Redis is busy running a script."), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("MASTERDOWN Link with MASTER is down"), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{replyError("ERR max number of clients reached"), true},
		{replyError("NOAUTH Authentication required."), true},
		{replyError("NOPERM User x has no permissions to run the 'fcall' command"), true},
		{replyError("ERR user_script:38: redlimit: Redis TIME is more than a calendar window away from the client clock"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("ERR redlimit: brk:{k}:tb4 holds a value redlimit did not write"), false},
		{replyError("BUSYKEY Target key name already exists."), false},
		{replyError("CROSSSLOT Keys in request don't hash to the same slot"), false},
	} {
		for _, err := range []error{tt.err, fmt.Errorf("core: redis: %w", tt.err)} {
			if got := redisFault(ctx, err); got != tt.want {
				t.Errorf("redisFault(%q) = %v, want %v", err, got, tt.want)
			}
		}
	}
}

// TestBreakerIgnoresShortStalls backs docs/operations.md ("The timeout"):
// with the default timeout (100 ms) and breaker (5 failures over two
// timeouts, 500 ms), a stall's burst of timeouts spread over 120 ms (Redis
// paused 120 ms of every 300 ms, issue 34) leaves the circuit closed, so
// every call still reaches Redis, which counts it; failures spread over a
// cool-down open it. At the former default of 50 ms the stall opened the
// circuit for 500 ms at a time, whose fallback decisions Redis never
// counted, and the net/http example served 1.098 x its limit.
func TestBreakerIgnoresShortStalls(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb)
	b := &l.breaker
	ctx := context.Background()
	timeout := context.DeadlineExceeded
	start := time.Unix(1e9, 0)
	for cycle := range 3 {
		t0 := start.Add(time.Duration(cycle) * 300 * time.Millisecond)
		for ms := 50; ms <= 170; ms += 2 { // the stalled calls time out from 50 ms to 170 ms
			b.record(ctx, timeout, t0.Add(time.Duration(ms)*time.Millisecond))
		}
		if !b.allow(t0.Add(171 * time.Millisecond)) {
			t.Fatalf("cycle %d: the circuit opened on a stall of 120 ms", cycle)
		}
		b.record(ctx, nil, t0.Add(200*time.Millisecond)) // Redis answers again
	}
	t0 := start.Add(time.Second)
	for ms := 0; ms <= 500; ms += 10 {
		b.record(ctx, timeout, t0.Add(time.Duration(ms)*time.Millisecond))
	}
	if b.allow(t0.Add(501 * time.Millisecond)) {
		t.Errorf("failures over a whole cool-down left the circuit closed")
	}
}
