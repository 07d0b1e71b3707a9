package core

import (
	"context"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRenewTakesALapsedPermitAgain guards "A permit that had lapsed ... is
// taken again, atomically, when the key has room for it" and "false means
// the permit had lapsed and the key is full: the request holds none, and
// nothing counts it" (Renew's godoc), under one Limit and as a layer
// beside a rate Limit (RenewLayers). Before, a renewal that found its
// permit lapsed kept nothing, so the request ran on uncounted beside a
// full key's permits.
func TestRenewTakesALapsedPermitAgain(t *testing.T) {
	ctx := context.Background()
	jobs := Limit{Algorithm: Concurrency, Rate: 1, Period: time.Second}
	layers := []Limit{PerMinute(100), jobs}
	type renewFunc func(l *Limiter, key string, taken []Result) (Result, error)
	type takeFunc func(l *Limiter, key string) ([]Result, error)
	for _, c := range []struct {
		name  string
		take  takeFunc
		renew renewFunc
	}{
		{"one Limit",
			func(l *Limiter, key string) ([]Result, error) {
				r, err := l.Allow(ctx, key, jobs)
				return []Result{r}, err
			},
			func(l *Limiter, key string, taken []Result) (Result, error) { return l.Renew(ctx, key, jobs, taken[0]) }},
		{"layers",
			func(l *Limiter, key string) ([]Result, error) { return l.AllowLayers(ctx, key, layers, 1) },
			func(l *Limiter, key string, taken []Result) (Result, error) {
				rs, err := l.RenewLayers(ctx, key, layers, taken)
				if err != nil {
					return Result{}, err
				}
				return rs[1], nil
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mr, _, l := miniLimiter(t)
			at := func(d time.Duration) { mr.SetTime(redistest.Epoch.Add(d)) }
			took := func(key, what string) []Result {
				t.Helper()
				rs, err := c.take(l, key)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return rs
			}
			allowed := func(rs []Result) bool { return rs[len(rs)-1].Allowed }

			// Room: the lapsed permit is taken again and counts.
			at(0)
			a := took("room", "take A")
			at(1500 * time.Millisecond) // A lapsed half a second ago
			if r, err := c.renew(l, "room", a); err != nil || !r.Allowed {
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
			if r, err := c.renew(l, "full", a); err != nil || r.Allowed {
				t.Fatalf("renewal of a lapsed permit, the key full: %+v, %v; want refused", r, err)
			}
			if err := l.RefundLayers(ctx, "full", layersOf(len(b), layers, jobs), permitOnly(b)); err != nil {
				t.Fatal(err)
			}
			if c := took("full", "take C"); !allowed(c) {
				t.Fatalf("a take once B gave its permit back: %+v; want admitted, the refused renewal counts nothing", c)
			}
		})
	}
}

// layersOf is the Limits a take of n Results was decided under.
func layersOf(n int, layers []Limit, one Limit) []Limit {
	if n == 1 {
		return []Limit{one}
	}
	return layers
}

// permitOnly is taken with only its last layer's (the permit's) Result.
func permitOnly(taken []Result) []Result {
	out := make([]Result, len(taken))
	out[len(out)-1] = taken[len(taken)-1]
	return out
}

// TestResetKeepsPermitsInFlight guards "Reset keeps them, so a Reset never
// lets more than Rate run at once" (Reset's godoc): before, Reset deleted
// the permits, and a second request ran beside the first under InFlight(1).
// The rate layer's quota is whole again.
func TestResetKeepsPermitsInFlight(t *testing.T) {
	ctx := context.Background()
	_, _, l := miniLimiter(t)
	layers := []Limit{PerMinute(1), InFlight(1)}
	first, err := l.AllowLayers(ctx, "k", layers, 1)
	if err != nil || !first[1].Allowed {
		t.Fatalf("first take: %+v, %v", first, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	second, err := l.AllowLayers(ctx, "k", layers, 1)
	if err != nil || second[1].Allowed || !second[0].Allowed {
		t.Fatalf("a take after a Reset, the first in flight: %+v, %v; want the rate layer whole and the permit refused", second, err)
	}
	if err := l.RefundLayers(ctx, "k", layers, permitOnly(first)); err != nil {
		t.Fatal(err)
	}
	if third, err := l.AllowLayers(ctx, "k", layers, 1); err != nil || !third[1].Allowed {
		t.Fatalf("a take once the first gave its permit back: %+v, %v; want admitted", third, err)
	}
}
