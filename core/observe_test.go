package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/observe"
	"github.com/redlimit/redlimit/internal/redistest"
)

// seen records what an observer of Observe is told.
type seen struct {
	mu  sync.Mutex
	obs []Observation
}

func (s *seen) f(_ context.Context, o Observation) {
	s.mu.Lock()
	s.obs = append(s.obs, o)
	s.mu.Unlock()
}

func (s *seen) take() []Observation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.obs
	s.obs = nil
	return out
}

// TestObserve: each call of every method is told once to each observer,
// with its verb, Rules, Result and error; a Wait once, not each of its
// tries; a call a Transport names carries the name; a Policy's calls are
// left out; stop ends it. It fails without Observe, which a direct call
// never reached before (issue 36, item 7).
func TestObserve(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, opsPatient)
	ctx := context.Background()
	var a, b seen
	stopA := l.Observe(a.f)
	stopB := l.Observe(b.f)
	tb := PerMinute(2).For("observe:tb")
	perm := Limit{Algorithm: Concurrency, Rate: 1, Period: time.Minute}.For("observe:c")
	taken, _ := l.Allow(ctx, 1, tb)
	a.take()
	b.take()
	steps := []struct {
		verb string
		call func() (Result, error)
		want func(Observation) bool
	}{
		{verbAllow, func() (Result, error) { return l.Allow(ctx, 1, tb) }, func(o Observation) bool { return o.Err == nil && o.Result.Allowed }},
		{verbAllow, func() (Result, error) { return l.Allow(ctx, 1, tb) }, func(o Observation) bool { return o.Err == nil && !o.Result.Allowed }},
		{verbAllow, func() (Result, error) { return l.Allow(ctx, 0, tb) }, func(o Observation) bool { return errors.Is(o.Err, ErrInvalidCost) }},
		{verbPeek, func() (Result, error) { return l.Peek(ctx, tb) }, func(o Observation) bool { return o.Err == nil && !o.Result.Allowed }},
		{verbRefund, func() (Result, error) { return Result{}, l.Refund(ctx, taken) }, func(o Observation) bool { return o.Err == nil && o.Result.Granted == 1 }},
		{verbAtMost, func() (Result, error) { return l.AllowAtMost(ctx, 5, tb) }, func(o Observation) bool { return o.Result.Granted == 1 }},
		{verbSettle, func() (Result, error) { return l.Settle(ctx, receiptFor(l, tb, 0, 0), 1) }, func(o Observation) bool { return o.Err == nil }},
		{verbWait, func() (Result, error) {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			return l.Wait(wctx, 1, tb) // the bucket is empty: refused at once, the deadline too near
		}, func(o Observation) bool { return errors.Is(o.Err, ErrWaitExceedsDeadline) }},
		{verbWait, func() (Result, error) { return l.Wait(ctx, 1, PerSecond(1000).For("observe:wait")) }, func(o Observation) bool { return o.Err == nil && o.Result.Allowed }},
		{verbAllow, func() (Result, error) { return l.Allow(ctx, 1, perm, PerSecond(5).For("observe:c")) }, func(o Observation) bool { return len(o.Rules) == 2 && len(o.Result.Rules) == 2 }},
		{verbRenew, func() (Result, error) {
			own := perm.Limit.For("observe:renew")
			r, err := l.Allow(ctx, 1, own)
			if err != nil || !r.Allowed {
				return r, fmt.Errorf("Allow of a permit: %+v, %v", r, err)
			}
			a.take()
			b.take()
			return l.Renew(ctx, r)
		}, func(o Observation) bool { return o.Err == nil && o.Result.Allowed }},
	}
	for i, st := range steps {
		res, err := st.call()
		for name, s := range map[string]*seen{"a": &a, "b": &b} {
			got := s.take()
			if len(got) != 1 {
				t.Fatalf("step %d (%s): observer %s told %d times, want once: %+v", i, st.verb, name, len(got), got)
			}
			o := got[0]
			if o.Verb != st.verb || o.Name != "" || !st.want(o) || o.Err != err || o.Latency <= 0 ||
				o.Verb != verbRefund && fmt.Sprint(o.Result) != fmt.Sprint(res) {
				t.Errorf("step %d: observer %s told %+v; want verb %s, the call's Result %+v and error %v", i, name, o, st.verb, res, err)
			}
		}
	}

	// A Transport names its calls; a Policy's are its Observers' to tell.
	if _, err := l.Allow(observe.Named(ctx, "outbound"), 1, tb); err != nil {
		t.Fatal(err)
	}
	if got := a.take(); len(got) != 1 || got[0].Name != "outbound" {
		t.Errorf("a named call: told %+v, want once with Name outbound", got)
	}
	b.take()
	if _, err := l.Allow(observe.ByPolicy(ctx, "api"), 1, tb); err != nil {
		t.Fatal(err)
	}
	if got := a.take(); len(got) != 0 {
		t.Errorf("a Policy's call: told %+v, want nothing", got)
	}

	// The Rules are the observer's to keep: a caller's slice changes.
	rules := []Rule{tb}
	_, _ = l.Peek(ctx, rules...)
	rules[0].Key = "changed"
	if got := a.take(); len(got) != 1 || got[0].Rules[0].Key != "observe:tb" {
		t.Errorf("Rules after the caller changed its slice: %+v", got)
	}
	b.take()

	stopA()
	if !observe.Observed(l) {
		t.Error("observe.Observed: false with one observer left")
	}
	stopB()
	_, _ = l.Allow(ctx, 1, tb)
	if got := append(a.take(), b.take()...); len(got) != 0 || observe.Observed(l) {
		t.Errorf("after stop: told %+v, Observed %v; want nothing", got, observe.Observed(l))
	}
	stopA() // twice: nothing
}

// TestObserveConcurrent: observers added and stopped while calls run;
// once stop has returned, an observer is told at most of the calls then
// in flight (one per goroutine), and of none after.
func TestObserveConcurrent(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb, opsPatient)
	ctx := context.Background()
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				_, _ = l.Allow(ctx, 1, PerSecond(1000).For(fmt.Sprintf("observe:%d:%d", g, i%10)))
			}
		})
	}
	for range 50 {
		var s seen
		stop := l.Observe(s.f)
		time.Sleep(time.Millisecond)
		stop()
		n := len(s.take())
		time.Sleep(time.Millisecond)
		if late := s.take(); len(late) > 4 {
			// At most the calls in flight when stop returned: one per goroutine.
			t.Fatalf("%d observations after stop (%d before)", len(late), n)
		}
	}
	close(done)
	wg.Wait()
	if observe.Observed(l) {
		t.Error("Observed after every stop")
	}
}
