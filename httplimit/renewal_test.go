package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// scriptCalls is a redis.Hook that reports each script call (a decision,
// a renewal, a give-back) on calls once it has returned, with its error;
// while down holds a message, every command fails with it, as if the
// client's link to Redis were cut.
type scriptCalls struct {
	calls chan error
	down  atomic.Pointer[string]
}

func (c *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		var err error
		if msg := c.down.Load(); msg != nil {
			err = errors.New(*msg)
		} else {
			err = next(ctx, cmd)
		}
		switch name := cmd.Name(); {
		case name != "evalsha" && name != "eval" && name != "fcall":
		case err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT"):
			// go-redis sends the script itself next: one call
		default:
			select {
			case c.calls <- err:
			default:
			}
		}
		return err
	}
}
func (c *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// cut fails every command of the client from now on with msg; "" mends it.
func (c *scriptCalls) cut(msg string) {
	if msg == "" {
		c.down.Store(nil)
	} else {
		c.down.Store(&msg)
	}
}

// next waits for the next script call, for at most limit.
func (c *scriptCalls) next(t *testing.T, limit time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-c.calls:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: no script call within %v", what, limit)
		return nil
	}
}

// inflightFleet is two instances' Policies of one permit, the lease given,
// on one miniredis whose clock stands still unless the test moves it (at),
// and the hook on the first instance's client, which reports its script
// calls and can cut its link.
func inflightFleet(t *testing.T, lease time.Duration, failClosed bool) (p1 *Policy, calls *scriptCalls, p2 *Policy, at func(time.Duration)) {
	mr, _ := redistest.Mini(t)
	prefix := prefixOf(t)
	calls = &scriptCalls{calls: make(chan error, 64)}
	policies := make([]*Policy, 2)
	for i := range policies {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		if i == 0 {
			rdb.AddHook(calls)
		}
		l := newLimiter(t, rdb, core.WithPrefix(prefix), core.WithBreaker(0, 0))
		policies[i] = mustNew(t, Config{Limiter: l, Limit: core.PerMinute(100), InFlight: 1, InFlightLease: lease, FailClosed: failClosed})
	}
	at = func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
	return policies[0], calls, policies[1], at
}

// admit decides a request that must be admitted with a permit, and
// returns it with the context its handler gets.
func admit(t *testing.T, p *Policy, what string) (Decision, context.Context) {
	t.Helper()
	d := p.testDecide(from("192.0.2.1"))
	if d.Outcome != OutcomeAllowed || !d.wantsFinish() {
		t.Fatalf("%s: %v (err %v), want allowed with a permit", what, d.Outcome, d.Err)
	}
	return d, d.attach(context.Background())
}

// TestInFlightLapsedPermitWithoutRoomCancelsContext guards "A permit that
// cannot be kept (the key is full ...) is lost: the handler's context
// (Decision.Attach) is cancelled with the cause ErrPermitLost ... and the
// request counts no more" (Config.InFlightLease). Redis' clock jumps past
// the first permit's lease, a request on another instance takes its
// place, and the first one's renewal finds the key full. Before, the
// renewal's answer was dropped and the first handler ran on beside the
// second.
func TestInFlightLapsedPermitWithoutRoomCancelsContext(t *testing.T) {
	const lease = 400 * time.Millisecond
	p, calls, other, at := inflightFleet(t, lease, true)
	first, ctx := admit(t, p, "first request")
	_ = calls.next(t, time.Second, "the take")
	at(time.Second) // the first permit lapsed, in Redis' eyes
	second, _ := admit(t, other, "a request after the first permit lapsed")
	select {
	case <-ctx.Done():
	case <-time.After(10 * lease):
		t.Fatalf("the first handler's context still runs %v after its permit lapsed and the key filled", 10*lease)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrPermitLost) {
		t.Errorf("cause %v, want ErrPermitLost", cause)
	}
	second.finish(http.StatusOK)
	// The first handler still runs, and holds nothing.
	third, _ := admit(t, other, "a request once the second ended")
	third.finish(http.StatusOK)
	first.finish(http.StatusOK)
}

// TestInFlightLapsedPermitWithRoomIsTakenAgain guards "one that finds its
// permit lapsed takes it again if the key has room" (Config.InFlightLease):
// after the renewal, a second request is refused for the permit, and the
// first handler's context runs on until Finish ends it.
func TestInFlightLapsedPermitWithRoomIsTakenAgain(t *testing.T) {
	const lease = 400 * time.Millisecond
	p, calls, other, at := inflightFleet(t, lease, true)
	first, ctx := admit(t, p, "first request")
	_ = calls.next(t, time.Second, "the take")
	at(time.Second) // the permit lapsed, and nobody took its place
	if err := calls.next(t, 10*lease, "the renewal"); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if d := other.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("a request after the renewal: %v (err %v), want %v: the renewal took the permit again", d.Outcome, d.Err, OutcomeInFlight)
	}
	if ctx.Err() != nil {
		t.Errorf("the handler's context ended (%v) though its permit was taken again", context.Cause(ctx))
	}
	first.finish(http.StatusOK)
	if ctx.Err() == nil || context.Cause(ctx) != context.Canceled {
		t.Errorf("after Finish the context is %v (cause %v), want canceled: it ends with the handler", ctx.Err(), context.Cause(ctx))
	}
}

// TestInFlightFailedRenewalRetriedWithinLease guards "A renewal that fails
// is tried again within what is left of the lease" (Config.InFlightLease):
// the first renewal fails, and the next comes well before the lease ends,
// not half a lease later, when the permit would have lapsed.
func TestInFlightFailedRenewalRetriedWithinLease(t *testing.T) {
	const lease = time.Second
	p, calls, _, _ := inflightFleet(t, lease, true)
	taken := time.Now()
	first, ctx := admit(t, p, "first request")
	_ = calls.next(t, time.Second, "the take")
	calls.cut("a blip")
	if err := calls.next(t, 10*lease, "the first renewal"); err == nil {
		t.Fatal("the first renewal succeeded: the fault missed it")
	}
	calls.cut("")
	if err := calls.next(t, 10*lease, "the renewal after the failed one"); err != nil {
		t.Fatalf("second renewal: %v", err)
	}
	if since := time.Since(taken); since >= lease-lease/8 {
		t.Errorf("the renewal after a failed one came %v after the take; want well within the %v lease", since, lease)
	}
	if ctx.Err() != nil {
		t.Errorf("the handler's context ended (%v) after one failed renewal", context.Cause(ctx))
	}
	first.finish(http.StatusOK)
}

// TestInFlightUnrenewedPermitFollowsFailPolicy guards "failing closed,
// Redis did not answer before the lease ran out ... is lost" and "Failing
// open, a request whose permit Redis could not renew runs on without it
// until Redis answers again, and then takes it again or loses it"
// (Config.InFlightLease). The first instance's link is cut from the take
// on: failing closed, its handler's context ends with ErrPermitLost before
// the lease does; failing open it runs past the lease, and is cancelled
// once the link is back and its renewal finds the key full.
func TestInFlightUnrenewedPermitFollowsFailPolicy(t *testing.T) {
	const lease = 400 * time.Millisecond
	t.Run("closed", func(t *testing.T) {
		p, calls, _, _ := inflightFleet(t, lease, true)
		taken := time.Now()
		first, ctx := admit(t, p, "first request")
		_ = calls.next(t, time.Second, "the take")
		calls.cut("link cut")
		select {
		case <-ctx.Done():
		case <-time.After(10 * lease):
			t.Fatalf("the context still runs %v after the take, the link cut, lease %v", 10*lease, lease)
		}
		if since := time.Since(taken); since >= lease {
			t.Errorf("context cancelled %v after the take; want before the %v lease ran out", since, lease)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ErrPermitLost) || !strings.Contains(cause.Error(), "link cut") {
			t.Errorf("cause %v, want ErrPermitLost naming the Redis error", cause)
		}
		first.finish(http.StatusOK)
	})
	t.Run("open", func(t *testing.T) {
		p, calls, other, at := inflightFleet(t, lease, false)
		first, ctx := admit(t, p, "first request")
		_ = calls.next(t, time.Second, "the take")
		calls.cut("link cut")
		at(time.Second) // the permit lapses; another instance takes its place
		second, _ := admit(t, other, "a request on another instance")
		select {
		case <-ctx.Done():
			t.Fatalf("failing open, the context ended with the link cut: %v", context.Cause(ctx))
		case <-time.After(2 * lease):
		}
		calls.cut("")
		select {
		case <-ctx.Done():
		case <-time.After(10 * lease):
			t.Fatalf("the context still runs %v after the link came back to a full key", 10*lease)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ErrPermitLost) || !strings.Contains(cause.Error(), "full") {
			t.Errorf("cause %v, want ErrPermitLost: the key is full", cause)
		}
		second.finish(http.StatusOK)
		first.finish(http.StatusOK)
	})
}

// TestResetKeepsInFlightPermits guards "and so are the InFlight permits of
// the key's requests still running" (Policy.Reset): before, a Reset let a
// second request in beside a running one under InFlight(1).
func TestResetKeepsInFlightPermits(t *testing.T) {
	p, _, other, _ := inflightFleet(t, time.Minute, true)
	first, _ := admit(t, p, "first request")
	if err := p.Reset(from("192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	if d := other.testDecide(from("192.0.2.1")); d.Outcome != OutcomeInFlight {
		t.Errorf("a request after Reset, the first still running: %v (err %v), want %v", d.Outcome, d.Err, OutcomeInFlight)
	}
	first.finish(http.StatusOK)
}
