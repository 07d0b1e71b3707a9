package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// The tests in this file each back one guarantee sentence of README.md or
// a doc comment, quoted beside it, and fail without it.

// TestCalendarRedisClockBehind backs README "Calendar quotas": "a Redis
// clock up to a window away either way still counts in its own window,
// and one further away fails the call rather than count in a wrong one",
// for a Redis clock behind the application's (TestCalendarClockSkew has
// it ahead). The application is a minute into a window while Redis is a
// minute before it: the quota is spent in Redis' window, which ends when
// Redis reaches the application's, and then that window's whole quota is
// there. Counted in the application's window, it would not be.
func TestCalendarRedisClockBehind(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		lim  Limit
		app  time.Time // the application's clock, a minute into its window
	}{
		{"daily", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily}, time.Date(2026, 5, 11, 0, 1, 0, 0, time.UTC)},
		{"monthly, after a month of 28 days", PerMonth(3, nil), time.Date(2026, 3, 1, 0, 1, 0, 0, time.UTC)},
		{"weekly", Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Weekly}, time.Date(2026, 1, 5, 0, 1, 0, 0, time.UTC)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mr, l, set := calendarLimiter(t)
			set(tt.app)
			behind := tt.app.Add(-2 * time.Minute) // the last minute of the window before
			redistest.SetTime(mr, behind)
			r, err := l.Allow(ctx, 3, tt.lim.For("k"))
			if err != nil || !r.Allowed || r.ResetAfter != time.Minute {
				t.Fatalf("Redis a minute before the application's window: AllowN(3) = %+v, %v; "+
					"want admitted, whole again in 1m (when Redis' own window ends)", r, err)
			}
			if r, err := l.Allow(ctx, 1, tt.lim.For("k")); err != nil || r.Allowed || r.RetryAfter != time.Minute {
				t.Errorf("then Allow = %+v, %v; want denied for 1m, until Redis' window ends", r, err)
			}
			redistest.SetTime(mr, tt.app.Add(-time.Minute)) // Redis reaches the application's window
			if r, err := l.Allow(ctx, 3, tt.lim.For("k")); err != nil || !r.Allowed {
				t.Errorf("Redis in the application's window: AllowN(3) = %+v, %v; want its whole quota: "+
					"the first 3 counted in Redis' own window", r, err)
			}
			if r, _ := l.Allow(ctx, 1, tt.lim.For("k")); r.Allowed {
				t.Errorf("a 4th unit in one window: %+v, want denied", r)
			}
			// Further behind than a window: an error, not a count.
			redistest.SetTime(mr, tt.lim.Calendar.start(behind, time.UTC).Add(-time.Minute))
			if _, err := l.Allow(ctx, 1, tt.lim.For("other")); err == nil || !strings.Contains(err.Error(), "calendar window") {
				t.Errorf("Redis more than a window behind: %v, want an error about the calendar windows", err)
			}
		})
	}
}

// formatCase is a state written by this version (current) or the one
// before (the suffix "2": before the function library, with the key's
// expiry in ms at the end of every string state), for a Limit.
type formatCase struct {
	name string
	lim  Limit
	// old is the state keys' old suffixes and values for a spent quota at
	// now µs, under lim.
	old func(now int64) map[string]string
}

var formatCases = []formatCase{
	{"token_bucket", PerMinute(3), func(now int64) map[string]string {
		// "<tokens> <time µs> <scale> <end ms>": empty, scaled by 60e6/3.
		return map[string]string{":tb2": fmt.Sprintf("0 %d 20000000 %d", now, now/1000+60000)}
	}},
	{"fixed_window", Limit{Algorithm: FixedWindow, Rate: 3, Period: time.Minute}, func(now int64) map[string]string {
		// "<start> <count> <end ms>": 3 of 3. (Read by today's calendar
		// window, it would pass for "<start> <end> <count>".)
		// And the previous one, "<start> <count>", before a window's end
		// became its key's expiry.
		start := now / 60e6 * 60e6
		return map[string]string{":fw2": fmt.Sprintf("%d 3 %d", start, now/1000+60000), ":fw3": fmt.Sprintf("%d 3", start)}
	}},
	{"sliding_window_counter", Limit{Algorithm: SlidingWindowCounter, Rate: 3, Period: time.Minute}, func(now int64) map[string]string {
		// "<start> <count> <previous> <end ms>".
		start := now / 60e6 * 60e6
		return map[string]string{":swc2": fmt.Sprintf("%d 3 3 %d", start, now/1000+120000)}
	}},
	{"leaky_bucket", Limit{Algorithm: LeakyBucket, Rate: 3, Period: time.Minute}, func(now int64) map[string]string {
		// "<queued> <time µs> <scale> <end ms>": a full queue.
		return map[string]string{":lb2": fmt.Sprintf("60000000 %d 20000000 %d", now, now/1000+60000)}
	}},
}

// TestOldFormatStateIgnored backs the algorithm table's "The digit marks the
// format of this version's scripts, so a key an earlier version wrote is
// never misread: it expires" (and README's "A key written by an earlier
// format of a script carries another suffix and is never misread; it
// expires"). A spent quota in the previous format, under its suffix, is
// neither read (the key's whole quota is there) nor written: it keeps its
// value and its TTL, to expire.
func TestOldFormatStateIgnored(t *testing.T) {
	ctx := context.Background()
	for _, b := range opsBackends() {
		for _, tt := range formatCases {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				rdb := b.open(t)
				prefix := realPrefix(t)
				cleanupPrefix(t, rdb, prefix)
				l := opsNew(t, rdb, WithPrefix(prefix), opsPatient)
				clock, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				old := tt.old(clock.UnixMicro())
				for suffix, v := range old {
					if err := rdb.Set(ctx, prefix+":{k}"+suffix, v, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
				r, err := l.Allow(ctx, tt.lim.Capacity(), tt.lim.For("k"))
				if err != nil || !r.Allowed {
					t.Fatalf("AllowN(the whole capacity) beside a spent state of the old format: %+v, %v; want admitted", r, err)
				}
				for suffix, v := range old {
					key := prefix + ":{k}" + suffix
					if got, err := rdb.Get(ctx, key).Result(); err != nil || got != v {
						t.Errorf("%s = %q, %v; want it untouched: %q", key, got, err, v)
					}
					if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
						t.Errorf("%s: TTL %v, %v; want its own TTL kept, to expire", key, ttl, err)
					}
				}
			})
		}
	}
}

// TestCorruptStateIsAnError backs the same sentence from the other side,
// and prelude.lua's "corrupt stops the call on a value none of these
// scripts wrote": under this version's suffix, a value of the old format,
// or one nobody wrote, fails the call with an error naming the key; the
// caller gets no decision (a zero Result), and the value stays as it was.
func TestCorruptStateIsAnError(t *testing.T) {
	ctx := context.Background()
	calendar := Limit{Algorithm: FixedWindow, Rate: 3, Calendar: Daily}
	sliding := Limit{Algorithm: SlidingWindow, Rate: 3, Period: time.Minute}
	type stateCase struct {
		name  string
		lim   Limit
		key   func(prefix string) string // the Redis key made corrupt
		value func(now int64) string
	}
	var cases []stateCase
	for _, fc := range formatCases {
		cases = append(cases, stateCase{fc.name + ", the old format", fc.lim,
			func(prefix string) string { return stateKeys(nil, prefix, "k", fc.lim.row(), 0)[0] },
			func(now int64) string {
				for _, v := range fc.old(now) {
					return v
				}
				return ""
			}})
	}
	garbage := func(int64) string { return "not a state" }
	for _, lim := range []Limit{PerMinute(3), {Algorithm: FixedWindow, Rate: 3, Period: time.Minute},
		{Algorithm: SlidingWindowCounter, Rate: 3, Period: time.Minute}, {Algorithm: LeakyBucket, Rate: 3, Period: time.Minute}, calendar} {
		cases = append(cases, stateCase{lim.row().suffixes[0][1:] + ", garbage", lim,
			func(prefix string) string { return stateKeys(nil, prefix, "k", lim.row(), 0)[0] }, garbage})
	}
	cases = append(cases, stateCase{"sliding_window's meta, garbage", sliding,
		func(prefix string) string { return stateKeys(nil, prefix, "k", sliding.row(), 0)[1] }, garbage})
	for _, b := range opsBackends() {
		for _, tt := range cases {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				rdb := b.open(t)
				prefix := realPrefix(t)
				cleanupPrefix(t, rdb, prefix)
				// The calendar windows on Redis' clock, which moves with the
				// wall clock from miniredis' epoch (opsBackends).
				redisNow := func() time.Time { now, _ := rdb.Time(context.Background()).Result(); return now }
				l := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithBreaker(0, 0), WithClock(redisNow))
				clock, err := rdb.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				key, value := tt.key(prefix), tt.value(clock.UnixMicro())
				if err := rdb.Set(ctx, key, value, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				r, err := l.Allow(ctx, 1, tt.lim.For("k"))
				if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "did not write") {
					t.Errorf("Allow over %s = %q: %+v, %v; want an error naming the key", key, value, r, err)
				}
				if !opsSame(r, Result{}) {
					t.Errorf("Allow over a corrupt state decided: %+v, want no decision", r)
				}
				if got, err := rdb.Get(ctx, key).Result(); err != nil || got != value {
					t.Errorf("%s = %q, %v after the call; want it left as it was, %q", key, got, err, value)
				}
			})
		}
	}
}

// lossyProxy forwards TCP connections to a Redis; when armed, it passes
// the next script call (EVALSHA or FCALL) on to Redis and then drops its
// reply, closing the client's connection: the reply is lost after Redis
// ran the script, and go-redis retries the command on a new connection.
type lossyProxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	dropped atomic.Int64
}

func startLossyProxy(t *testing.T, target string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	go p.serve()
	return p
}

// The command names as go-redis writes them, RESP bulk strings: the
// library's source (FUNCTION LOAD) never holds them so.
var scriptCalls = [][]byte{[]byte("$7\r\nevalsha\r\n"), []byte("$5\r\nfcall\r\n"), []byte("$4\r\neval\r\n")}

func (p *lossyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		var drop atomic.Bool // this connection's next reply is lost
		go func() {
			defer func() { _ = u.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					for _, name := range scriptCalls {
						if bytes.Contains(buf[:n], name) && p.armed.CompareAndSwap(true, false) {
							drop.Store(true) // before Redis can answer
						}
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer func() { _ = c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 && drop.Load() {
					p.dropped.Add(1)
					_ = u.Close()
					return
				}
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// TestRetriedScriptNeverAdmitsTwice backs core.New's (and README's) "go-redis
// retries a command whose reply was lost, and a retried call counts its
// requests twice (it never admits one twice)". What backs it: the script
// is atomic and writes its state before it replies, so the retry runs
// against the state the lost run left, and the caller hears only the
// retry. A reply lost after Redis took a unit: under 3 per minute the
// request is admitted once with 1 left (two units counted); under 1 per
// minute the retry finds the only unit taken and refuses, so the request
// is not admitted at all, let alone twice.
func TestRetriedScriptNeverAdmitsTwice(t *testing.T) {
	ctx := context.Background()
	for _, b := range opsBackends() {
		t.Run(b.name, func(t *testing.T) {
			direct := b.open(t)
			proxy := startLossyProxy(t, direct.Options().Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), DB: direct.Options().DB,
				Username: direct.Options().Username, Password: direct.Options().Password, ContextTimeoutEnabled: true,
				MaxRetries: 3}) // go-redis' default, stated: the retry is the point
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := realPrefix(t)
			cleanupPrefix(t, direct, prefix)
			l := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithBreaker(0, 0), WithBatching(1))
			for _, lim := range []Limit{{Algorithm: FixedWindow, Rate: 3, Period: time.Hour}, {Algorithm: FixedWindow, Rate: 1, Period: time.Hour}} {
				// The script is loaded first, so that the retried command is
				// the script itself rather than an EVALSHA that found none.
				if _, err := l.Allow(ctx, 1, lim.For("warm")); err != nil {
					t.Fatal(err)
				}
			}

			proxy.armed.Store(true)
			r, err := l.Allow(ctx, 1, Limit{Algorithm: FixedWindow, Rate: 3, Period: time.Hour}.For("three"))
			if got := proxy.dropped.Load(); got != 1 {
				t.Fatalf("%d replies lost, want 1: the test did not lose the reply", got)
			}
			if err != nil || !r.Allowed || r.Remaining != 1 {
				t.Errorf("a request whose first reply was lost, under 3 per hour: %+v, %v; want admitted once, 1 left (counted twice)", r, err)
			}

			proxy.armed.Store(true)
			r, err = l.Allow(ctx, 1, Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Hour}.For("one"))
			if got := proxy.dropped.Load(); got != 2 {
				t.Fatalf("%d replies lost, want 2", got)
			}
			if err != nil || r.Allowed {
				t.Errorf("a request whose first reply was lost, under 1 per hour: %+v, %v; want refused: "+
					"the lost run took the only unit, and a retry never admits it again", r, err)
			}
		})
	}
}

// TestRetriedRefundGivesBackOnce backs Limiter.Refund's "A refund never
// makes room the limit would not have had if the units had never been
// taken" (ARCHITECTURE: "a refund never makes room the limit would not
// have had") where README's "a retried script counts its requests twice
// (it never admits one twice)" meets refunds: a Refund whose reply is
// lost is retried by go-redis, as a take is. Under 3 per hour, a and b are
// taken and a is refunded, its reply lost: b still counts, so at most 2
// more fit (2 if the refund counted once, 1 if it was lost).
//
// Without the fix (a refund sent once, never retried: call.go's noRetry),
// 3 fit, on miniredis and Redis alike: a script's REFUND is not
// idempotent, so a retry gives a's unit back a second time.
func TestRetriedRefundGivesBackOnce(t *testing.T) {
	ctx := context.Background()
	lim := Limit{Algorithm: FixedWindow, Rate: 3, Period: time.Hour}
	for _, b := range opsBackends() {
		t.Run(b.name, func(t *testing.T) {
			direct := b.open(t)
			proxy := startLossyProxy(t, direct.Options().Addr)
			rdb := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), DB: direct.Options().DB,
				Username: direct.Options().Username, Password: direct.Options().Password, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := realPrefix(t)
			cleanupPrefix(t, direct, prefix)
			l := opsNew(t, rdb, WithPrefix(prefix), opsPatient, WithBreaker(0, 0), WithBatching(1))
			warm, err := l.Allow(ctx, 1, lim.For("warm"))
			if err == nil {
				err = l.Refund(ctx, warm) // loads the refund's script too
			}
			if err != nil {
				t.Fatal(err)
			}
			a, errA := l.Allow(ctx, 1, lim.For("k"))
			_, errB := l.Allow(ctx, 1, lim.For("k"))
			if errA != nil || errB != nil || !a.Allowed {
				t.Fatalf("taking a and b: %+v, %v, %v", a, errA, errB)
			}
			proxy.armed.Store(true)
			// A refund not retried fails with the lost reply: that is the
			// strict side (it may or may not have given back), and fine.
			_ = l.Refund(ctx, a)
			if got := proxy.dropped.Load(); got != 1 {
				t.Fatalf("%d replies lost, want 1: the test did not lose the reply", got)
			}
			admitted := 0
			for range 5 {
				if r, err := l.Allow(ctx, 1, lim.For("k")); err == nil && r.Allowed {
					admitted++
				}
			}
			if admitted > 2 {
				t.Errorf("after a's refund was retried, with b still counted: %d more admitted under 3 per hour, want at most 2", admitted)
			}
		})
	}
}

// gate is a redis.Hook that holds every script call before it reaches
// Redis until release is closed, and tells arrived of each as it comes;
// calls counts those that ran (not an EVALSHA that found no script, which
// go-redis follows with the EVAL of the same call).
type gate struct {
	arrived chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" || name == "fcall" {
			g.arrived <- struct{}{}
			<-g.release
			err := next(ctx, cmd)
			if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
				g.calls.Add(1)
			}
			return err
		}
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// queued is how many decisions wait in l's batch groups.
func queued(l *Limiter) int {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	n := 0
	for _, g := range l.batch.groups {
		n += len(g.queue)
	}
	return n
}

// TestBoundCallerLeaves backs boundCtx's "waits of ours watch the
// caller's Done too": a caller whose context can be cancelled shares the
// Limiter's deadline (1 s here), whose Done does not close when the
// caller gives up. Queued behind a group's four calls in flight, or
// waiting on a detached call, it leaves at once with context.Canceled,
// while the calls are still held: watching the shared Done alone, it
// would leave a second later with DeadlineExceeded. With its call on the
// wire, it ends at the deadline, with the caller's error (ended).
func TestBoundCallerLeaves(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("detach=%v", detach), func(t *testing.T) {
			_, rdb := redistest.Mini(t)
			l := opsNew(t, rdb, WithTimeout(time.Second))
			l.detach = detach
			lim := PerMinute(10)
			if _, err := l.Allow(context.Background(), 1, lim.For("warm")); err != nil {
				t.Fatal(err)
			}
			g := &gate{arrived: make(chan struct{}, 16), release: make(chan struct{})}
			rdb.AddHook(g)
			var wg sync.WaitGroup
			defer wg.Wait() // after the release, deferred below
			defer close(g.release)
			held := 4 // the group's calls in flight, so the next caller queues
			if detach {
				held = 0
			}
			for range held {
				wg.Go(func() { _, _ = l.Allow(context.Background(), 1, lim.For("hot")) })
				<-g.arrived
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			wg.Go(func() {
				_, err := l.Allow(ctx, 1, lim.For("hot"))
				done <- err
			})
			waitFor := func() bool { return queued(l) > 0 }
			if detach {
				waitFor = func() bool { return len(g.arrived) > 0 }
			}
			for deadline := time.Now().Add(10 * time.Second); !waitFor(); runtime.Gosched() {
				if time.Now().After(deadline) {
					t.Fatal("the caller neither queued nor sent its call")
				}
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("a caller that gave up: %v, want context.Canceled", err)
			}
		})
	}
	// Its call on the wire, to a Redis that stalls: go-redis waits for the
	// shared deadline, and the error is still the caller's, not a fault.
	t.Run("in flight", func(t *testing.T) {
		_, rdb := redistest.Mini(t)
		l := opsNew(t, rdb, WithTimeout(100*time.Millisecond))
		lim := PerMinute(10)
		if _, err := l.Allow(context.Background(), 1, lim.For("warm")); err != nil {
			t.Fatal(err)
		}
		st := stallScripts{arrived: make(chan struct{}, 16)}
		rdb.AddHook(st)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := l.Allow(ctx, 1, lim.For("hot"))
			done <- err
		}()
		<-st.arrived
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
			t.Errorf("a caller that gave up with its call on the wire: %v, want context.Canceled, not ErrUnavailable", err)
		}
		// Given up before it is sent: not sent.
		if _, err := l.Allow(ctx, 1, lim.For("hot")); !errors.Is(err, context.Canceled) {
			t.Errorf("a caller that gave up before its call: %v, want context.Canceled", err)
		}
		if n := len(st.arrived); n != 0 {
			t.Errorf("%d calls sent for a caller that had given up", n)
		}
	})
}

// TestBatchLoneCallerNeverWaits backs README "Batching": "A decision whose
// group has fewer than 4 calls in flight is sent at once, in a call of its
// own ... So a lone request never waits for company" (and the batcher's
// "a lone or lightly loaded caller never waits for company"). Every script
// call is held before it reaches Redis (gate), so nothing returns: each of
// four callers of one key must still send its own call while the calls
// before it are held, the first of them alone. A fifth finds four in
// flight and queues, which shows the test would see a caller that waits;
// it goes in the next call once they return.
func TestBatchLoneCallerNeverWaits(t *testing.T) {
	ctx := context.Background()
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, opsPatient)
	lim := PerMinute(10)
	if _, err := l.Allow(ctx, 1, lim.For("warm")); err != nil { // loads the script: one call per decision after this
		t.Fatal(err)
	}
	g := &gate{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	rdb.AddHook(g)
	released := false
	defer func() {
		if !released {
			close(g.release) // let the held callers end with the test
		}
	}()

	var wg sync.WaitGroup
	results := make([]Result, 5)
	errs := make([]error, 5)
	for i := range 4 {
		wg.Go(func() { results[i], errs[i] = l.Allow(ctx, 1, lim.For("hot")) })
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second): // a stuck caller, not a slow one
			t.Fatalf("caller %d's call did not go out while %d calls of its group were in flight and none had returned: it waited for company", i+1, i)
		}
	}
	wg.Go(func() { results[4], errs[4] = l.Allow(ctx, 1, lim.For("hot")) })
	// batch.go has no event for a caller joining a queue: its queue is
	// read under the batcher's lock until the caller is in it, or its
	// call arrives.
	for deadline := time.Now().Add(10 * time.Second); queued(l) == 0; runtime.Gosched() {
		if len(g.arrived) > 0 {
			t.Fatal("the fifth caller sent a call of its own with 4 of its group in flight, want it queued for the next")
		}
		if time.Now().After(deadline) {
			t.Fatal("the fifth caller, with 4 calls in flight, neither queued nor sent a call")
		}
	}
	released = true
	close(g.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil || !results[i].Allowed {
			t.Errorf("caller %d: %+v, %v; want admitted", i+1, results[i], err)
		}
	}
	if n := g.calls.Load(); n != 5 {
		t.Errorf("%d script calls for 5 callers, want 5: one for each of the 4, and the queued fifth's batch", n)
	}
}
