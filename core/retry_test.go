package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// failKey fails the calls that name a key holding key: before they leave
// (a refused connection) or, ran, after Redis ran them (a lost reply).
type failKey struct {
	key         string
	before, ran atomic.Bool
}

func (f *failKey) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *failKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !strings.Contains(fmt.Sprint(cmd.Args()[1:]), f.key) {
			return next(ctx, cmd)
		}
		switch {
		case f.before.Load():
			err := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
			cmd.SetErr(err)
			return err
		case f.ran.Load():
			_ = next(ctx, cmd)
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestRetryGivesNothingTwice backs Refund's "after an error, a retry with
// the same receipt is safe: it gives nothing back twice" for a receipt of
// several Cluster slots (issue 35 item 3: both keys got 2 units back for
// 1 taken when the caller retried). The second slot fails before its call
// leaves: the retry gives back that slot alone. It fails after Redis ran
// its call: the retry gives back nothing there (the strict side). A second
// Refund or Settle of a receipt given back gives nothing. Without the
// receipt's record of the Rules given back, the first key's retry gives
// back twice.
func TestRetryGivesNothingTwice(t *testing.T) {
	ctx := context.Background()
	for _, ran := range []bool{false, true} {
		t.Run(fmt.Sprintf("ran=%v", ran), func(t *testing.T) {
			_, rdb, l := miniLimiter(t)
			splitBySlot(l)
			fail := &failKey{key: "{org}"}
			rdb.AddHook(fail)
			user, org := PerHour(100).For("user"), PerHour(100).For("org")
			if s := split([]Rule{user, org}, l.group); len(s.groups) != 2 {
				t.Fatalf("user and org in %d slots, want 2", len(s.groups))
			}
			for _, r := range []Rule{user, org} {
				if res, err := l.Allow(ctx, 50, r); err != nil || !res.Allowed {
					t.Fatal(res, err)
				}
			}
			taken, err := l.Allow(ctx, 5, user, org)
			if err != nil || !taken.Allowed {
				t.Fatal(taken, err)
			}
			fail.before.Store(!ran)
			fail.ran.Store(ran)
			if err := l.Refund(ctx, taken); err == nil {
				t.Fatal("Refund with org's slot failing: nil error")
			}
			fail.before.Store(false)
			fail.ran.Store(false)
			if u, o := remaining(t, l, user.Limit, user.Key), remaining(t, l, org.Limit, org.Key); u != 50 || o != map[bool]int{false: 45, true: 50}[ran] {
				t.Fatalf("after the failed Refund: user %d, org %d left", u, o)
			}
			if err := l.Refund(ctx, taken); err != nil {
				t.Fatal(err)
			}
			if u, o := remaining(t, l, user.Limit, user.Key), remaining(t, l, org.Limit, org.Key); u != 50 || o != 50 {
				t.Errorf("after the retry: user %d, org %d left, want 50 and 50 (given back once)", u, o)
			}
			if err := l.Refund(ctx, taken); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Settle(ctx, taken, 0); err != nil {
				t.Fatal(err)
			}
			if u, o := remaining(t, l, user.Limit, user.Key), remaining(t, l, org.Limit, org.Key); u != 50 || o != 50 {
				t.Errorf("after a second Refund and a Settle: user %d, org %d left, want 50 and 50", u, o)
			}
		})
	}
}
