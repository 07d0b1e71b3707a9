package nethttplimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/redlimittest"
)

// upstream is an API that counts the requests that reach it. A request
// with ?status=429&retry=30 is answered with that status and Retry-After.
type upstream struct {
	srv    *httptest.Server
	served atomic.Int64
	mu     sync.Mutex
	times  []time.Time    // when each request arrived
	before func(*url.URL) // runs before each answer, if set
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	up := &upstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.served.Add(1)
		up.mu.Lock()
		up.times = append(up.times, time.Now())
		before := up.before
		up.mu.Unlock()
		if before != nil {
			before(r.URL)
		}
		q := r.URL.Query()
		if v, ok := q["retry"]; ok {
			w.Header().Set("Retry-After", v[0])
		}
		if v, ok := q["date"]; ok {
			w.Header().Set("Date", v[0])
		}
		status := http.StatusOK
		if s := q.Get("status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(up.srv.Close)
	return up
}

// transport is NewTransport(cfg) to up, on l, with the Transport's clock
// set to now when it is given (a redlimittest Redis' Now).
func (up *upstream) transport(t *testing.T, l *core.Limiter, now func() time.Time, cfg TransportConfig) *Transport {
	t.Helper()
	cfg.Limiter = l
	if cfg.Base == nil {
		cfg.Base = up.srv.Client().Transport
	}
	tr, err := NewTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		tr.now = now
	}
	return tr
}

// get sends GET up's URL with query through tr, as http.Client does, and
// returns the status, or the error.
func (up *upstream) get(ctx context.Context, tr http.RoundTripper, query string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.srv.URL+"/?"+query, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// refusal is the *LimitError in err, failing the test without one.
func refusal(t *testing.T, err error) *LimitError {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want a *LimitError", err)
	}
	if le.Result.Allowed || le.Result.RetryAfter <= 0 {
		t.Errorf("LimitError's Result = %+v, want a denial with RetryAfter > 0", le.Result)
	}
	return le
}

// TestTransportSharesQuota: four Transports, each on its own Limiter of
// one Redis, let exactly the quota through per step of Redis' clock,
// however many requests they send at once, and refuse the rest with a
// *LimitError before they reach the upstream.
func TestTransportSharesQuota(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	var fleet []*Transport
	for range 4 {
		fleet = append(fleet, up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: core.PerSecond(100), FailFast: true}))
	}
	steps := []struct {
		advance time.Duration
		each    int // requests each Transport sends at once
		want    int64
	}{
		{0, 50, 100}, // a full bucket
		{time.Second, 50, 100},
		{250 * time.Millisecond, 50, 25},
		{10 * time.Millisecond, 10, 1},
		{0, 10, 0},
		{time.Hour, 100, 100}, // never more than the burst
	}
	for i, st := range steps {
		r.Advance(st.advance)
		before := up.served.Load()
		var wg sync.WaitGroup
		var refused atomic.Int64
		for _, tr := range fleet {
			for range st.each {
				wg.Go(func() {
					_, err := up.get(context.Background(), tr, "")
					if err == nil {
						return
					}
					if le := (*LimitError)(nil); !errors.As(err, &le) || le.Result.RetryAfter <= 0 {
						t.Errorf("step %d: %v, want a *LimitError with RetryAfter > 0", i, err)
					}
					refused.Add(1)
				})
			}
		}
		wg.Wait()
		if got := up.served.Load() - before; got != st.want {
			t.Errorf("step %d (+%v, %d at once from 4): the upstream served %d, want %d", i, st.advance, 4*st.each, got, st.want)
		}
		if got, want := refused.Load(), int64(4*st.each)-st.want; got != want {
			t.Errorf("step %d: %d refused, want %d", i, got, want)
		}
	}
}

// wallClock is a redis.Hook that moves a miniredis' clock to follow the
// wall clock before every command, for the tests in which the Transport
// sleeps (Wait sleeps on the wall clock).
type wallClock struct {
	mr    *miniredis.Miniredis
	start time.Time
}

func (w *wallClock) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *wallClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		redistest.SetTime(w.mr, redistest.Epoch.Add(time.Since(w.start)))
		return next(ctx, cmd)
	}
}

func (w *wallClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		redistest.SetTime(w.mr, redistest.Epoch.Add(time.Since(w.start)))
		return next(ctx, cmds)
	}
}

// TestTransportWaitsForItsTurn: waiting Transports send every request,
// and the k-th reaches the upstream no sooner than the quota allows: a
// burst of 10, then one per 10ms, counted from before the first decision.
func TestTransportWaitsForItsTurn(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	start := time.Now()
	rdb.AddHook(&wallClock{mr: mr, start: start})
	up := newUpstream(t)
	limit := core.Limit{Rate: 100, Period: time.Second, Burst: 10}
	var wg sync.WaitGroup
	for range 4 {
		l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		tr := up.transport(t, l, nil, TransportConfig{Limit: limit})
		for range 10 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if status, err := up.get(ctx, tr, ""); err != nil || status != http.StatusOK {
					t.Errorf("got %d, %v; want 200 after a wait", status, err)
				}
			})
		}
	}
	wg.Wait()
	up.mu.Lock()
	times := slices.Clone(up.times)
	up.mu.Unlock()
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if len(times) != 40 {
		t.Fatalf("the upstream served %d, want 40", len(times))
	}
	for k, at := range times {
		if early := time.Duration(k+1-10)*10*time.Millisecond - at.Sub(start); early > 0 {
			t.Errorf("request %d reached the upstream %v after the start, %v before the quota allows", k+1, at.Sub(start), early)
		}
	}
}

// TestTransportFailFast: a refused request is a *LimitError (through
// http.Client's *url.Error) with the exact RetryAfter, that matches no
// deadline; its body is closed and it never reaches Base.
func TestTransportFailFast(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	base := &countingBase{next: up.srv.Client().Transport}
	tr := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: core.PerSecond(100), FailFast: true, Base: base})
	for range 100 {
		if status, err := up.get(context.Background(), tr, ""); err != nil || status != http.StatusOK {
			t.Fatalf("within the quota: %d, %v", status, err)
		}
	}
	body := &trackedBody{Reader: strings.NewReader("job")}
	_, err := (&http.Client{Transport: tr}).Post(up.srv.URL, "text/plain", body)
	le := refusal(t, err)
	if got, want := le.Result.RetryAfter, 10*time.Millisecond; got != want {
		t.Errorf("RetryAfter %v, want %v", got, want)
	}
	if got, want := le.Key, "outbound:"+strings.TrimPrefix(up.srv.URL, "http://"); got != want {
		t.Errorf("Key %q, want %q", got, want)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, core.ErrWaitExceedsDeadline) {
		t.Errorf("a fail-fast refusal %v matches a deadline", err)
	}
	if !body.closed.Load() {
		t.Error("the refused request's body was not closed")
	}
	if got := base.calls.Load(); got != 100 {
		t.Errorf("Base was called %d times, want 100", got)
	}
}

// TestTransportDeadline: a waiting Transport refuses at once a request
// whose wait would outlast its deadline, with a *LimitError that matches
// core.ErrWaitExceedsDeadline and context.DeadlineExceeded and carries the
// whole wait.
func TestTransportDeadline(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	tr := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: core.PerHour(1)})
	if _, err := up.get(context.Background(), tr, ""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := up.get(ctx, tr, "")
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("the refusal took %v, want it at once", took)
	}
	le := refusal(t, err)
	if !errors.Is(err, core.ErrWaitExceedsDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match core.ErrWaitExceedsDeadline and context.DeadlineExceeded", err)
	}
	if got, want := le.Result.RetryAfter, time.Hour; got != want {
		t.Errorf("RetryAfter %v, want %v", got, want)
	}
	// http.Client.Timeout is a deadline on the request's context too.
	_, err = (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(up.srv.URL)
	if !errors.Is(err, core.ErrWaitExceedsDeadline) {
		t.Errorf("with Client.Timeout 10s: %v, want core.ErrWaitExceedsDeadline", err)
	}
	if got := up.served.Load(); got != 1 {
		t.Errorf("the upstream served %d, want 1", got)
	}
}

// scriptReplies is a redis.Hook that sends on its channel once each
// decision (a script or function call) has its reply.
type scriptReplies chan struct{}

func (s scriptReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s scriptReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch cmd.Name() {
		case "evalsha", "eval", "fcall":
			s <- struct{}{}
		}
		return err
	}
}

func (s scriptReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestTransportCanceledWhileWaiting: a request waiting for an hour returns
// as soon as its context is canceled, with context.Canceled, its body
// closed, and nothing sent.
func TestTransportCanceledWhileWaiting(t *testing.T) {
	r := redlimittest.Start(t)
	replies := make(scriptReplies, 16)
	r.Client().AddHook(replies)
	up := newUpstream(t)
	tr := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: core.PerHour(1)})
	if _, err := up.get(context.Background(), tr, ""); err != nil {
		t.Fatal(err)
	}
	for len(replies) > 0 { // (EVALSHA, then EVAL the first time)
		<-replies
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := &trackedBody{Reader: strings.NewReader("job")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, up.srv.URL, body)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		done <- err
	}()
	<-replies // the denial: the Transport now sleeps its hour
	canceled := time.Now()
	cancel()
	select {
	case err := <-done:
		if late := time.Since(canceled); late >= time.Second {
			t.Errorf("RoundTrip returned %v after the cancel, want at once", late)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RoundTrip did not return after the cancel")
	}
	if !body.closed.Load() {
		t.Error("the canceled request's body was not closed")
	}
	if got := up.served.Load(); got != 1 {
		t.Errorf("the upstream served %d, want 1", got)
	}
}

// TestTransportPauseSeenByTheFleet: a 429 with Retry-After: 30 that one
// Transport sees stops another, on another Limiter of the same Redis, for
// exactly 30s of Redis' clock (a token bucket of 100 per second), whether
// it fails fast or waits; then requests flow again.
func TestTransportPauseSeenByTheFleet(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	limit := core.PerSecond(100)
	a := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: limit})
	b := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: limit, FailFast: true})
	bWaits := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: limit})
	if status, err := up.get(context.Background(), a, "status=429&retry=30"); err != nil || status != http.StatusTooManyRequests {
		t.Fatalf("the 429 came back as %d, %v", status, err)
	}
	_, err := up.get(context.Background(), b, "")
	if got, want := refusal(t, err).Result.RetryAfter, 30*time.Second; got != want {
		t.Errorf("the other instance must wait %v, want %v", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = up.get(ctx, bWaits, "")
	if got := refusal(t, err).Result.RetryAfter; !errors.Is(err, core.ErrWaitExceedsDeadline) || got != 30*time.Second {
		t.Errorf("a waiting instance with 10s to go: %v, RetryAfter %v; want core.ErrWaitExceedsDeadline, 30s", err, got)
	}
	r.Advance(30*time.Second - time.Microsecond)
	if _, err := up.get(context.Background(), b, ""); err == nil {
		t.Error("1µs before the pause ends, a request was sent")
	}
	r.Advance(time.Microsecond)
	if status, err := up.get(context.Background(), b, ""); err != nil || status != http.StatusOK {
		t.Errorf("once the pause ended: %d, %v; want 200", status, err)
	}
	if got := up.served.Load(); got != 2 {
		t.Errorf("the upstream served %d, want 2 (the 429, then one after the pause)", got)
	}
}

// TestTransportPauseByAlgorithm: after a 429 with Retry-After: 30, another
// instance is refused until at least 30s have passed, and sends at the
// time its refusal said: within one unit's time for the buckets, within
// two Periods for the windows, for every algorithm NewTransport takes.
func TestTransportPauseByAlgorithm(t *testing.T) {
	const pause = 30 * time.Second
	type pauseCase struct {
		name  string
		limit core.Limit
		most  time.Duration // the longest pause allowed beyond 30s
	}
	tests := []pauseCase{
		{"token bucket, 100/s", core.PerSecond(100), 10 * time.Millisecond},
		{"token bucket, 100/h: a unit is 36s", core.PerHour(100), 36 * time.Second},
		{"token bucket, 100/s, burst 1000", core.Limit{Rate: 100, Period: time.Second, Burst: 1000}, 10 * time.Millisecond},
		{"leaky bucket, 100/s, queue 10", core.Limit{Algorithm: core.LeakyBucket, Rate: 100, Period: time.Second, Burst: 10}, 10 * time.Millisecond},
		{"fixed window, 100/s", core.Limit{Algorithm: core.FixedWindow, Rate: 100, Period: time.Second}, 2 * time.Second},
		{"fixed window, 10/min", core.Limit{Algorithm: core.FixedWindow, Rate: 10, Period: time.Minute}, 2 * time.Minute},
		{"sliding window counter, 100/s", core.Limit{Algorithm: core.SlidingWindowCounter, Rate: 100, Period: time.Second}, 2 * time.Second},
		{"sliding window, 100/s", core.Limit{Algorithm: core.SlidingWindow, Rate: 100, Period: time.Second}, 2 * time.Second},
	}
	// Every algorithm NewTransport takes has a case, so that one core adds
	// is paused here too (debt switches on the algorithm).
	l := redlimittest.Start(t).NewLimiter()
	for a := range core.Algorithm(observe.Algorithms) {
		_, err := NewTransport(TransportConfig{Limiter: l, Limit: core.Limit{Algorithm: a, Rate: 1, Period: time.Second}})
		if err == nil && !slices.ContainsFunc(tests, func(tt pauseCase) bool { return tt.limit.Algorithm == a }) {
			t.Errorf("%v: NewTransport takes it, and no case here pauses it", a)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redlimittest.Start(t)
			r.Advance(123456 * time.Microsecond) // off every window's edge
			up := newUpstream(t)
			// (A waits: a LeakyBucket request that fails fast is sent only
			// into an empty queue.)
			a := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: tt.limit})
			b := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: tt.limit, FailFast: true})
			key := "outbound:" + strings.TrimPrefix(up.srv.URL, "http://")
			if res, err := r.NewLimiter().Allow(context.Background(), 3, tt.limit.For(key)); err != nil || !res.Allowed {
				t.Fatalf("spending 3: %+v, %v", res, err) // some of the quota is spent
			}
			if status, err := up.get(context.Background(), a, "status=429&retry=30"); err != nil || status != http.StatusTooManyRequests {
				t.Fatalf("the 429 came back as %d, %v", status, err)
			}
			_, err := up.get(context.Background(), b, "")
			wait := refusal(t, err).Result.RetryAfter
			t.Logf("paused for %v", wait)
			early := time.Duration(0)
			if tt.limit.Algorithm == core.LeakyBucket {
				early = time.Microsecond // sent with a Delay of at most 1µs
			}
			if wait < pause-early || wait > pause+tt.most {
				t.Errorf("refused with RetryAfter %v, want %v <= RetryAfter <= %v", wait, pause-early, pause+tt.most)
			}
			before := time.Microsecond
			if tt.limit.Algorithm == core.FixedWindow {
				before += time.Millisecond // (its waits are whole ms, up to 1 ms long)
			}
			if wait > before {
				r.Advance(wait - before)
				if _, err := up.get(context.Background(), b, ""); err == nil {
					t.Errorf("sent %v after the 429, before its RetryAfter of %v", wait-before, wait)
				}
				r.Advance(before)
			}
			if status, err := up.get(context.Background(), b, ""); err != nil || status != http.StatusOK {
				t.Errorf("after the RetryAfter: %d, %v; want 200", status, err)
			}
		})
	}
}

// TestRetryAfter: the header is the upstream's, so anything that is not
// a delay ahead is ignored, and any delay is capped.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	date := func(t time.Time) string { return t.UTC().Format(http.TimeFormat) }
	tests := []struct {
		name       string
		retryAfter string
		date       string // the response's Date header
		want       time.Duration
	}{
		{"absent", "", "", 0},
		{"seconds", "30", "", 30 * time.Second},
		{"seconds with blanks", " 30 ", "", 30 * time.Second},
		{"zero", "0", "", 0},
		{"negative", "-5", "", 0},
		{"a fraction", "1.5", "", 0},
		{"garbage", "soon", "", 0},
		{"a sign", "+30", "", 0},
		{"beyond the cap", "3601", "", time.Hour},
		{"beyond int64 nanoseconds", "9300000000", "", time.Hour},
		{"beyond uint64", "99999999999999999999999999", "", time.Hour},
		{"an HTTP-date, from now", date(now.Add(40 * time.Second)), "", 40 * time.Second},
		// Guards: "an upstream whose Date is wrong (1970) cannot pause the
		// fleet for longer than the date is ahead of ours" (retryAfter).
		// Before, these two paused for the whole MaxPause.
		{"an HTTP-date, a Date an hour behind us", date(now.Add(40 * time.Second)), date(now.Add(-time.Hour)), 40 * time.Second},
		{"an HTTP-date, Date 1970", date(now.Add(30 * time.Second)), date(time.Unix(0, 0)), 30 * time.Second},
		{"an HTTP-date, from a Date 20s ahead of us", date(now.Add(40 * time.Second)), date(now.Add(20 * time.Second)), 20 * time.Second},
		{"an HTTP-date, Date past it", date(now.Add(40 * time.Second)), date(now.Add(time.Minute)), 0},
		{"an HTTP-date past", date(now.Add(-time.Minute)), "", 0},
		{"an HTTP-date in year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", "", time.Hour},
		{"an HTTP-date, garbage Date", date(now.Add(40 * time.Second)), "yesterday", 40 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.retryAfter != "" {
				h.Set("Retry-After", tt.retryAfter)
			}
			if tt.date != "" {
				h.Set("Date", tt.date)
			}
			if got := retryAfter(h, now, time.Hour); got != tt.want {
				t.Errorf("Retry-After %q, Date %q: %v, want %v", tt.retryAfter, tt.date, got, tt.want)
			}
		})
	}
}

// TestRetryAfterDateSweep walks a date-form Retry-After over where the
// date lies and where the upstream's Date lies, each from 1970 to far
// ahead of the local clock, and the cap: the pause is never longer than
// the date is ahead of either clock, never negative, never over the cap,
// and it is the lesser of the two clocks' readings.
func TestRetryAfterDateSweep(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	offsets := []time.Duration{-1 << 62, -24 * time.Hour, -time.Hour, -time.Minute, -time.Second, 0,
		time.Second, 30 * time.Second, time.Hour, 48 * time.Hour}
	at := func(d time.Duration) time.Time {
		if d == -1<<62 {
			return time.Unix(0, 0)
		}
		return now.Add(d)
	}
	for _, most := range []time.Duration{time.Second, time.Hour} {
		for _, ra := range offsets[1:] {
			for _, date := range append(offsets, 1) { // 1: no Date header
				h := http.Header{"Retry-After": {at(ra).UTC().Format(http.TimeFormat)}}
				if date != 1 {
					h.Set("Date", at(date).UTC().Format(http.TimeFormat))
				}
				got := retryAfter(h, now, most)
				want := ra // what the local clock reads
				if date != 1 {
					want = min(want, at(ra).Sub(at(date)))
				}
				want = min(max(want, 0), most)
				if got != want || got > max(ra, 0) || got < 0 || got > most {
					t.Errorf("Retry-After now%+v, Date %v, cap %v: pause %v, want %v", ra, at(date), most, got, want)
				}
			}
		}
	}
}

// TestTransportPauseHostile: what pauses the fleet, and for how long, end
// to end: a huge Retry-After pauses it for MaxPause, not for years;
// garbage, another status or no header, not at all.
func TestTransportPauseHostile(t *testing.T) {
	tests := []struct {
		name     string
		query    string
		maxPause time.Duration
		want     time.Duration // the other instance's RetryAfter; 0: it is served
	}{
		{"huge", "status=429&retry=99999999999", 0, time.Hour},
		{"huge, MaxPause 10s", "status=429&retry=99999999999", 10 * time.Second, 10 * time.Second},
		{"30s, MaxPause 10s", "status=429&retry=30", 10 * time.Second, 10 * time.Second},
		{"503", "status=503&retry=5", 0, 5 * time.Second},
		{"MaxPause negative: never", "status=429&retry=30", -1, 0},
		{"negative", "status=429&retry=-30", 0, time.Second}, // a 429 without a usable Retry-After: defaultPause
		{"garbage", "status=429&retry=" + url.QueryEscape("30; DROP TABLE"), 0, time.Second},
		{"no Retry-After", "status=429", 0, time.Second}, // it was served at once: the quota left at 99 of 100
		{"no Retry-After, MaxPause 10ms", "status=429", 10 * time.Millisecond, 10 * time.Millisecond},
		{"503 without Retry-After", "status=503", 0, 0},
		{"200 with a Retry-After", "status=200&retry=30", 0, 0},
		{"500 with a Retry-After", "status=500&retry=30", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redlimittest.Start(t)
			up := newUpstream(t)
			cfg := TransportConfig{Limit: core.PerSecond(100), FailFast: true, MaxPause: tt.maxPause}
			a, b := up.transport(t, r.NewLimiter(), r.Now, cfg), up.transport(t, r.NewLimiter(), r.Now, cfg)
			if _, err := up.get(context.Background(), a, tt.query); err != nil {
				t.Fatal(err)
			}
			_, err := up.get(context.Background(), b, "")
			if tt.want == 0 {
				if err != nil {
					t.Errorf("after %s: %v, want the request served", tt.query, err)
				}
				return
			}
			if got := refusal(t, err).Result.RetryAfter; got != tt.want {
				t.Errorf("after %s: RetryAfter %v, want %v", tt.query, got, tt.want)
			}
		})
	}
}

// TestTransportPauseUpstreamDate: an upstream whose Date says 1970 and
// whose Retry-After is a date 30s ahead pauses the fleet 30s, not the
// whole MaxPause (an hour), end to end. Guards: "an upstream whose Date is
// wrong (1970) cannot pause the fleet for longer than the date is ahead
// of ours" (retryAfter).
func TestTransportPauseUpstreamDate(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	cfg := TransportConfig{Limit: core.PerSecond(100), FailFast: true}
	a, b := up.transport(t, r.NewLimiter(), r.Now, cfg), up.transport(t, r.NewLimiter(), r.Now, cfg)
	q := url.Values{
		"status": {"429"},
		"retry":  {r.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)},
		"date":   {time.Unix(0, 0).UTC().Format(http.TimeFormat)},
	}
	if _, err := up.get(context.Background(), a, q.Encode()); err != nil {
		t.Fatal(err)
	}
	_, err := up.get(context.Background(), b, "")
	if got := refusal(t, err).Result.RetryAfter; got != 30*time.Second {
		t.Errorf("after a Retry-After 30s ahead with Date 1970: the fleet pauses %v, want 30s", got)
	}
}

// TestTransportPauseWithoutRedis: when Redis cannot record a pause (it
// failed just then, or the Limit is a calendar window), the Transport that
// saw the 429 keeps it on its own clock, failing fast or refusing a wait
// its deadline cannot cover; the others cannot know of it.
func TestTransportPauseWithoutRedis(t *testing.T) {
	tests := []struct {
		name     string
		limit    core.Limit
		down     bool // Redis fails while the upstream answers
		failFast bool
	}{
		{"Redis down during the 429, fail fast", core.PerSecond(100), true, true},
		{"Redis down during the 429, wait", core.PerSecond(100), true, false},
		{"a calendar window, fail fast", core.PerMonth(1000, nil), false, true},
		{"a calendar window, wait", core.PerMonth(1000, nil), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redlimittest.Start(t)
			up := newUpstream(t)
			if tt.down {
				up.before = func(u *url.URL) {
					if u.Query().Has("retry") {
						r.Down()
					}
				}
			}
			a := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: tt.limit, FailFast: tt.failFast})
			b := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: tt.limit, FailFast: true})
			if status, err := up.get(context.Background(), a, "status=429&retry=30"); err != nil || status != http.StatusTooManyRequests {
				t.Fatalf("the 429 came back as %d, %v", status, err)
			}
			r.Up()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := up.get(ctx, a, "")
			if got := refusal(t, err).Result.RetryAfter; got != 30*time.Second {
				t.Errorf("the Transport that saw the 429: RetryAfter %v, want 30s", got)
			}
			if got, want := errors.Is(err, core.ErrWaitExceedsDeadline), !tt.failFast; got != want {
				t.Errorf("%v: matches core.ErrWaitExceedsDeadline: %v, want %v", err, got, want)
			}
			if _, err := up.get(context.Background(), b, ""); err != nil {
				t.Errorf("another instance: %v, want it served (it cannot know)", err)
			}
			r.Advance(30 * time.Second)
			if _, err := up.get(ctx, a, ""); err != nil {
				t.Errorf("once its pause ended: %v, want it served", err)
			}
		})
	}
}

// TestFloorsBounded: a Transport keeps at most maxFloors pauses of its
// own, and makes room from those that have ended.
func TestFloorsBounded(t *testing.T) {
	var f floors
	now := redlimittest.Epoch
	for i := range maxFloors {
		if !f.set("k"+strconv.Itoa(i), now, time.Minute) {
			t.Fatalf("pause %d not kept, want room for %d", i+1, maxFloors)
		}
	}
	if f.set("one more", now, time.Minute) {
		t.Errorf("pause %d kept, want at most %d", maxFloors+1, maxFloors)
	}
	if !f.set("k0", now, 2*time.Minute) || f.left("k0", now) != 2*time.Minute {
		t.Error("a key already paused could not be paused longer")
	}
	if f.set("k1", now, time.Second); f.left("k1", now) != time.Minute {
		t.Error("a shorter pause shortened a longer one")
	}
	later := now.Add(time.Minute)
	if !f.set("one more", later, time.Minute) || f.left("one more", later) != time.Minute {
		t.Error("no room made from the pauses that ended")
	}
	if got := f.n.Load(); got != 2 {
		t.Errorf("%d pauses kept, want 2 (k0 and the new one)", got)
	}
}

// TestTransportConcurrentPauses: 429s that arrive together still pause
// the fleet for at least Retry-After. Those one Transport sees are charged
// once; each other Transport that sees one at the same moment may charge
// it again, up to Retry-After and the bucket's burst each.
func TestTransportConcurrentPauses(t *testing.T) {
	const pause = 30 * time.Second
	r := redlimittest.Start(t)
	up := newUpstream(t)
	limit := core.PerSecond(100)
	checker := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: limit, FailFast: true})
	for _, transports := range []int{1, 3} {
		var fleet []*Transport
		for range transports {
			fleet = append(fleet, up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: limit}))
		}
		// The upstream answers once every request has arrived: all are
		// sent before the first 429 comes back.
		var arrived atomic.Int64
		all := make(chan struct{})
		up.before = func(*url.URL) {
			if arrived.Add(1) == int64(10*transports) {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Error("not every request reached the upstream")
			}
		}
		var wg sync.WaitGroup
		for _, tr := range fleet {
			for range 10 {
				wg.Go(func() {
					if status, err := up.get(context.Background(), tr, "status=429&retry=30"); err != nil || status != http.StatusTooManyRequests {
						t.Errorf("the 429 came back as %d, %v", status, err)
					}
				})
			}
		}
		wg.Wait()
		up.before = nil
		_, err := up.get(context.Background(), checker, "")
		got := refusal(t, err).Result.RetryAfter
		// Each charge covers the pause and what the bucket still held (at
		// most its burst, a second's worth).
		if most := time.Duration(transports) * (pause + time.Second); got < pause || got > most || transports == 1 && got != pause {
			t.Errorf("10 429s at once through each of %d Transports: RetryAfter %v, want %v to %v (exactly %v through one)", transports, got, pause, most, pause)
		}
		r.Advance(time.Hour) // a fresh bucket for the next round
	}
}

// countingBase is a Base that counts its calls.
type countingBase struct {
	calls atomic.Int64
	idle  atomic.Int64 // CloseIdleConnections calls
	next  http.RoundTripper
}

func (c *countingBase) RoundTrip(req *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	return c.next.RoundTrip(req)
}

func (c *countingBase) CloseIdleConnections() { c.idle.Add(1) }

// trackedBody is a request body that records its Close.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return nil
}

// TestTransportRoundTripContract: on every path that does not send the
// request, RoundTrip closes its body and never calls Base; on every path,
// it leaves the request as it was.
func TestTransportRoundTripContract(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	base := &countingBase{next: up.srv.Client().Transport}
	l := r.NewLimiter(core.WithLocalFallback(0, 0)) // "Redis down" is an error
	mk := func(cfg TransportConfig) http.RoundTripper {
		cfg.Base = base
		return up.transport(t, l, r.Now, cfg)
	}
	spent := mk(TransportConfig{Name: "spent", Limit: core.PerHour(1), FailFast: true})
	if _, err := up.get(context.Background(), spent, ""); err != nil {
		t.Fatal(err)
	}
	waiting := mk(TransportConfig{Name: "spent", Limit: core.PerHour(1)})
	limit := core.PerSecond(3)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		tr      http.RoundTripper
		url     string
		ctx     context.Context
		down    bool
		wantErr error // nil: any error
	}{
		{"the zero Transport", &Transport{}, up.srv.URL, nil, false, nil},
		{"no URL host", mk(TransportConfig{Limit: limit}), "/relative", nil, false, nil},
		{"no key", mk(TransportConfig{Limit: limit, Key: func(*http.Request) string { return "" }}), up.srv.URL, nil, false, nil},
		{"zero cost", mk(TransportConfig{Limit: limit, Cost: func(*http.Request) int { return 0 }}), up.srv.URL, nil, false, core.ErrInvalidCost},
		{"cost above capacity", mk(TransportConfig{Limit: limit, Cost: func(*http.Request) int { return 4 }}), up.srv.URL, nil, false, core.ErrInvalidCost},
		{"Redis down", mk(TransportConfig{Limit: limit}), up.srv.URL, nil, true, nil},
		{"fail fast, denied", spent, up.srv.URL, nil, false, nil},
		{"a wait past the deadline", waiting, up.srv.URL, nil, false, core.ErrWaitExceedsDeadline},
		{"a canceled context", waiting, up.srv.URL, canceled, false, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				ctx = c
			}
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, tt.url, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request", "1")
			before := snapshot(req)
			if tt.down {
				r.Down()
				defer r.Up()
			}
			calls := base.calls.Load()
			resp, err := tt.tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
				t.Fatal("RoundTrip succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("RoundTrip = %v, want %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "nethttplimit: ") {
				t.Errorf("error %q does not say where it comes from", err)
			}
			if !body.closed.Load() {
				t.Error("the body was not closed")
			}
			if got := base.calls.Load() - calls; got != 0 {
				t.Errorf("Base was called %d times, want 0", got)
			}
			if after := snapshot(req); !reflect.DeepEqual(after, before) {
				t.Errorf("the request changed: %+v, was %+v", after, before)
			}
		})
	}
}

var errBase = errors.New("base failed")

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// snapshot is what RoundTrip must not change of a request.
func snapshot(r *http.Request) map[string]any {
	return map[string]any{"method": r.Method, "url": r.URL.String(), "host": r.Host, "header": r.Header.Clone(),
		"body": r.Body, "ctx": r.Context(), "len": r.ContentLength}
}

// TestTransportSentRequest: the request a Transport sends is the
// caller's, unchanged, and it counts even when Base fails (the upstream
// may have seen it); a nil Transport or request fails, without a panic.
func TestTransportSentRequest(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	l := r.NewLimiter()
	mk := func(cfg TransportConfig) *Transport { return up.transport(t, l, r.Now, cfg) }
	limit := core.PerSecond(3)
	failing := mk(TransportConfig{Name: "failing", Limit: core.PerHour(1), FailFast: true})
	failing.base = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		closeBody(req)
		return nil, errBase
	})
	if _, err := failing.RoundTrip(httptest.NewRequest(http.MethodGet, up.srv.URL, nil)); !errors.Is(err, errBase) {
		t.Errorf("Base's error came back as %v, want it as it was", err)
	}
	if _, err := failing.RoundTrip(httptest.NewRequest(http.MethodGet, up.srv.URL, nil)); !errors.As(err, new(*LimitError)) {
		t.Errorf("after Base failed: %v, want the unit spent (the upstream may have seen it) and a *LimitError", err)
	}
	var nilTransport *Transport
	if _, err := nilTransport.RoundTrip(httptest.NewRequest(http.MethodGet, "/", nil)); err == nil {
		t.Error("a nil *Transport sent a request")
	}
	if _, err := mk(TransportConfig{Limit: limit}).RoundTrip(nil); err == nil {
		t.Error("RoundTrip(nil) did not fail")
	}
	// And the request a Transport sends is the caller's, unchanged.
	req := httptest.NewRequest(http.MethodGet, up.srv.URL+"/?q=1", nil)
	req.RequestURI = ""
	before := snapshot(req)
	resp, err := mk(TransportConfig{Limit: limit}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if after := snapshot(req); !reflect.DeepEqual(after, before) {
		t.Errorf("the request sent changed: %+v, was %+v", after, before)
	}
}

// TestTransportCloseIdleConnections: http.Client.CloseIdleConnections
// reaches Base through the Transport.
func TestTransportCloseIdleConnections(t *testing.T) {
	r := redlimittest.Start(t)
	up := newUpstream(t)
	base := &countingBase{next: up.srv.Client().Transport}
	tr := up.transport(t, r.NewLimiter(), r.Now, TransportConfig{Limit: core.PerSecond(1), Base: base})
	(&http.Client{Transport: tr}).CloseIdleConnections()
	if got := base.idle.Load(); got != 1 {
		t.Errorf("Base's CloseIdleConnections ran %d times, want 1", got)
	}
}

// TestNewTransportErrors: a config that cannot work is refused at once,
// with an error that says why.
func TestNewTransportErrors(t *testing.T) {
	l := redlimittest.Start(t).NewLimiter()
	tests := []struct {
		name    string
		cfg     TransportConfig
		want    string
		wantErr error
	}{
		{"no Limiter", TransportConfig{Limit: core.PerSecond(1)}, "nil Limiter", nil},
		{"the zero Limit", TransportConfig{Limiter: l}, "Limit", core.ErrInvalidLimit},
		{"a negative Rate", TransportConfig{Limiter: l, Limit: core.Limit{Rate: -1, Period: time.Second}}, "Rate", core.ErrInvalidLimit},
		{"Concurrency", TransportConfig{Limiter: l, Limit: core.InFlight(10)}, "Concurrency", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTransport(tt.cfg)
			if err == nil || tr != nil {
				t.Fatalf("NewTransport = %v, %v; want an error", tr, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "nethttplimit: NewTransport: ") {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v does not match %v", err, tt.wantErr)
			}
		})
	}
}

// TestTransportRealRedis: two instances on a real Redis, and on a Redis
// Cluster, share the quota, and a 429 one of them sees pauses the other.
func TestTransportRealRedis(t *testing.T) {
	t.Run("redis", func(t *testing.T) { transportShared(t, redistest.Real(t)) })
	t.Run("cluster", func(t *testing.T) { transportShared(t, redistest.Cluster(t)) })
}

func transportShared(t *testing.T, rdb redis.UniversalClient) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "redlimit-transport:" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			// One DEL a key: a master holds many slots, and one DEL of
			// keys in several of them is refused (CROSSSLOT).
			keys, err := c.Keys(ctx, prefix+":*").Result()
			for _, k := range keys {
				if err == nil {
					err = c.Del(ctx, k).Err()
				}
			}
			return err
		}
		var err error
		switch c := rdb.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, del)
		case *redis.Client:
			err = del(ctx, c)
		}
		if err != nil {
			t.Errorf("cleaning up keys %s:*: %v", prefix, err)
		}
	})
	up := newUpstream(t)
	// 5 per 10s: a slow machine does not refill a unit during the test.
	cfg := TransportConfig{Limit: core.Limit{Rate: 5, Period: 10 * time.Second}, FailFast: true}
	var fleet, paused []*Transport
	for range 2 {
		l, err := core.New(rdb, core.WithPrefix(prefix), core.WithLogger(nil), core.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, up.transport(t, l, nil, cfg))
		cfg := cfg
		cfg.Name = "paused" // a quota of its own, whole
		paused = append(paused, up.transport(t, l, nil, cfg))
	}
	var wg sync.WaitGroup
	for _, tr := range fleet {
		for range 5 {
			wg.Go(func() { _, _ = up.get(context.Background(), tr, "") })
		}
	}
	wg.Wait()
	if got := up.served.Load(); got != 5 {
		t.Errorf("10 requests at once from 2 instances: the upstream served %d, want 5", got)
	}
	// A 5 second pause seen by the first: the second waits it out, and
	// up to the 2s a unit takes more.
	if status, err := up.get(context.Background(), paused[0], "status=429&retry=5"); err != nil || status != http.StatusTooManyRequests {
		t.Fatalf("the 429 came back as %d, %v", status, err)
	}
	_, err := up.get(context.Background(), paused[1], "")
	if got := refusal(t, err).Result.RetryAfter; got < 4*time.Second || got > 7*time.Second {
		t.Errorf("the other instance must wait %v, want about 5s (4s to 5s + 2s)", got)
	}
}
