package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRenewTakesALapsedPermitAgain guards "A permit that had lapsed ... is
// taken again, atomically, when the key has room for it" and "false means
// a permit had lapsed and its key is full: the request holds none there,
// and nothing counts it" (Renew's godoc), under one Limit and as a Rule
// beside a rate Rule of the same key. Before, a renewal that found its
// permit lapsed kept nothing, so the request ran on uncounted beside a
// full key's permits.
func TestRenewTakesALapsedPermitAgain(t *testing.T) {
	ctx := context.Background()
	jobs := Limit{Algorithm: Concurrency, Rate: 1, Period: time.Second}
	layers := []Limit{PerMinute(100), jobs}
	for _, c := range []struct {
		name  string
		rules func(key string) []Rule
	}{
		{"one Limit", func(key string) []Rule { return []Rule{jobs.For(key)} }},
		{"layers", func(key string) []Rule { return opsRules(key, layers) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			at := func(d time.Duration) { redistest.SetTime(mr, redistest.Epoch.Add(d)) }
			took := func(key, what string) Result {
				t.Helper()
				r, err := l.Allow(ctx, 1, c.rules(key)...)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return r
			}
			// renew is what Renew decided for the permit's Rule.
			renew := func(key string, taken Result) (Result, error) {
				r, err := l.Renew(ctx, taken)
				if err != nil || r.Rules == nil {
					return r, err
				}
				if r.Allowed != permitOf(r).Allowed {
					t.Errorf("Renew = %+v: Allowed is not the permit's", r)
				}
				return permitOf(r), nil
			}
			allowed := func(r Result) bool { return permitOf(r).Allowed }

			// Room: the lapsed permit is taken again and counts.
			at(0)
			a := took("room", "take A")
			at(1500 * time.Millisecond) // A lapsed half a second ago
			if r, err := renew("room", a); err != nil || !r.Allowed {
				t.Fatalf("renewal of a lapsed permit, the key empty: %+v, %v; want taken again", r, err)
			}
			if b := took("room", "take B"); allowed(b) {
				t.Fatalf("a take beside the permit renewed after it lapsed: %+v; want refused, the key is full", b)
			}
			at(2400 * time.Millisecond) // within a Period of the renewal
			if b := took("room", "take B"); allowed(b) {
				t.Fatalf("a take 0.9 s after the renewal: %+v; want refused, the permit holds a Period from it", b)
			}

			// No room: B took the lapsed permit's place; A holds nothing.
			at(0)
			a = took("full", "take A")
			at(1500 * time.Millisecond)
			b := took("full", "take B")
			if !allowed(b) {
				t.Fatalf("a take after A's permit lapsed: %+v; want admitted", b)
			}
			if r, err := renew("full", a); err != nil || r.Allowed {
				t.Fatalf("renewal of a lapsed permit, the key full: %+v, %v; want refused", r, err)
			}
			if err := l.Refund(ctx, permitOnly(b)); err != nil {
				t.Fatal(err)
			}
			if c := took("full", "take C"); !allowed(c) {
				t.Fatalf("a take once B gave its permit back: %+v; want admitted, the refused renewal counts nothing", c)
			}
		})
	}
}

// permitOf is the last Rule's (the permit's) Result of r.
func permitOf(r Result) Result {
	if r.Rules == nil {
		return r
	}
	return r.Rules[len(r.Rules)-1]
}

// permitOnly is taken with only its last Rule's (the permit's) Result:
// the other Rules are left alone.
func permitOnly(taken Result) Result {
	if taken.Rules == nil {
		return taken
	}
	parts := make([]Result, len(taken.Rules))
	parts[len(parts)-1] = taken.Rules[len(parts)-1]
	taken.Rules = parts
	return taken
}

// TestResetKeepsPermitsInFlight guards "Reset keeps them, so a Reset never
// lets more than Rate run at once" (Reset's godoc): before, Reset deleted
// the permits, and a second request ran beside the first under InFlight(1).
// The rate layer's quota is whole again.
func TestResetKeepsPermitsInFlight(t *testing.T) {
	ctx := context.Background()
	_, _, l := miniLimiter(t)
	layers := []Rule{PerMinute(1).For("k"), InFlight(1).For("k")}
	first, err := l.Allow(ctx, 1, layers...)
	if err != nil || !first.Rules[1].Allowed {
		t.Fatalf("first take: %+v, %v", first, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	second, err := l.Allow(ctx, 1, layers...)
	if err != nil || second.Rules[1].Allowed || !second.Rules[0].Allowed {
		t.Fatalf("a take after a Reset, the first in flight: %+v, %v; want the rate layer whole and the permit refused", second, err)
	}
	if err := l.Refund(ctx, permitOnly(first)); err != nil {
		t.Fatal(err)
	}
	if third, err := l.Allow(ctx, 1, layers...); err != nil || !third.Rules[1].Allowed {
		t.Fatalf("a take once the first gave its permit back: %+v, %v; want admitted", third, err)
	}
}

// TestRenewAfterReleaseTakesNothing backs "a release wins over any renewal
// sent before it, whenever the renewal arrives" (scripts/concurrency.lua):
// a renewal held back until its permit was given back (as Redis runs it
// after a stall) keeps nothing, and the key is free, under one Limit and
// beside a rate Rule, on miniredis and a real Redis. Before, the late
// renewal took the permit again, and the key refused everyone for a lease
// (a ghost permit, issue 34).
func TestRenewAfterReleaseTakesNothing(t *testing.T) {
	jobs := Limit{Algorithm: Concurrency, Rate: 1, Period: 2 * time.Second}
	for _, server := range []string{"mini", "real"} {
		for _, c := range []struct {
			name  string
			rules []Rule
		}{
			{"one Limit", []Rule{jobs.For("k")}},
			{"layers", opsRules("k", []Limit{PerMinute(100), jobs})},
		} {
			t.Run(server+"/"+c.name, func(t *testing.T) {
				var rdb *redis.Client
				if server == "mini" {
					_, rdb = redistest.Mini(t)
				} else {
					rdb = redis.NewClient(redistest.Real(t).Options())
					t.Cleanup(func() { _ = rdb.Close() })
				}
				prefix := fmt.Sprintf("ghost%d", time.Now().UnixNano())
				t.Cleanup(func() { dropPrefix(t, rdb, prefix) })
				g := &callGate{entered: make(chan struct{}), release: make(chan struct{})}
				rdb.AddHook(g)
				l := opsNew(t, rdb, WithPrefix(prefix), opsPatient)
				ctx := context.Background()
				taken, err := l.Allow(ctx, 1, c.rules...)
				if err != nil || !taken.Allowed {
					t.Fatalf("the take: %+v, %v", taken, err)
				}
				g.on.Store(true)
				renewed := make(chan Result, 1)
				go func() {
					r, err := l.Renew(ctx, taken)
					if err != nil {
						t.Error(err)
					}
					renewed <- r
				}()
				<-g.entered // the renewal, held before Redis sees it
				g.on.Store(false)
				if err := l.Refund(ctx, taken); err != nil {
					t.Fatal(err)
				}
				g.release <- struct{}{}
				if r := <-renewed; permitOf(r).Allowed {
					t.Errorf("the renewal after the release: %+v, want the permit not kept", r)
				}
				if r, err := l.Allow(ctx, 1, c.rules...); err != nil || !r.Allowed {
					t.Errorf("a new request after the release and the late renewal: %+v, %v; want admitted (a ghost permit holds the key)", r, err)
				}
			})
		}
	}
}

// TestRenewBindsItsReceipt backs docs/limits.md#receipts' "another
// Limiter's ... is refused with ErrInvalidCost" for Renew, and "a Result
// that took nothing ... gives nothing back" as Renew reads it: a denial
// holds no permit, so renewing it takes none. Before, Renew of another
// Limiter's receipt, or of one whose Remaining was changed, took a permit
// in that Limiter's state, and Renew of a denial's Result took a permit
// nobody would give back, filling an InFlight(1) key for its Period.
func TestRenewBindsItsReceipt(t *testing.T) {
	ctx := context.Background()
	_, rdb, l := miniLimiter(t)
	other, err := New(rdb, WithPrefix("other"), WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	rule := InFlight(1).For("k")
	held, err := l.Allow(ctx, 1, rule)
	if err != nil || !held.Allowed {
		t.Fatal(held, err)
	}
	denied, err := l.Allow(ctx, 1, rule)
	if err != nil || denied.Allowed {
		t.Fatal(denied, err)
	}
	edited := held
	edited.Granted = 7
	for name, c := range map[string]struct {
		l *Limiter
		r Result
	}{"another Limiter's": {other, held}, "an edited": {l, edited}} {
		if res, err := c.l.Renew(ctx, c.r); !errors.Is(err, ErrInvalidCost) || res.Allowed {
			t.Errorf("Renew of %s receipt: %+v, %v; want ErrInvalidCost", name, res, err)
		}
	}
	if res, err := other.Allow(ctx, 1, rule); err != nil || !res.Allowed {
		t.Errorf("the other Limiter's key after the refused Renew: %+v, %v; want room", res, err)
	}
	if err := l.Refund(ctx, held); err != nil {
		t.Fatal(err)
	}
	if res, err := l.Renew(ctx, denied); err != nil || res.Allowed {
		t.Errorf("Renew of a denial: %+v, %v; want nothing kept", res, err)
	}
	if res, err := l.Allow(ctx, 1, rule); err != nil || !res.Allowed {
		t.Errorf("after Renew of a denial the key is full: %+v, %v", res, err)
	}
}
