package givebackattack2

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// slotted hides a *redis.Client from core's type switch: core then puts
// each key in a script call of its own, as keys in different Cluster
// slots are.
type slotted struct{ *redis.Client }

// TestForgedRulePartOverGives: a receipt of several Rules checks each of
// its parts (Result.Rules[i]) against the key, algorithm, layer and
// Granted it names, but not that the part is this decision's: the part of
// another decision of the same keys, with a larger Granted, passes the
// check. docs/limits.md#receipts says a receipt "whose Granted was
// changed, whose Rules were reordered or cut ... is refused with
// ErrInvalidCost".
//
//	kept 4 from k, j and their twins       k 6, j 6, twins 6
//	R1 = Allow(1, k, j)                    k 5, j 5
//	R2 = Allow(5, k, j), kept (twins too)  k 0, j 0, twins 1
//	R1' = R1 with Rules[0] = R2.Rules[0]; Refund(R1')
//
// In one slot (one script call), the call's n is the first part's
// Granted: 5 come back to both k and j, which R1 took 1 from: both end
// at 5, their twins (R2 kept, R1 given back) at 1: 4 units above, with
// R2 never given back. In separate slots, k's part gives back with R2's
// stamp and position. Both on a frozen clock and with 1 ms between steps.
func TestForgedRulePartOverGives(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, sep := range []bool{false, true} {
			for _, step := range []time.Duration{0, time.Millisecond} {
				name := fmt.Sprintf("%s/separate-slots=%v/step=%v", alg, sep, step)
				t.Run(name, func(t *testing.T) {
					e := newEnv(t)
					l := e.limiter(e.client(0), "gb2")
					var lr redis.UniversalClient = e.client(0)
					if sep {
						lr = slotted{e.client(0)}
					}
					ls := e.limiter(lr, "gb2")
					lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
					k, j, tk, tj := lim.For("k"), lim.For("j"), lim.For("tk"), lim.For("tj")
					e.allow(l, 4, k, j, tk, tj)
					e.adv(step)
					r1 := e.allow(ls, 1, k, j)
					e.adv(step)
					r2 := e.allow(ls, 5, k, j)
					e.allow(l, 5, tk, tj) // the twins keep R2 (same instant)
					e.adv(step)
					forged := r1
					forged.Rules = []core.Result{r2.Rules[0], r1.Rules[1]}
					err := ls.Refund(ctx, forged)
					e.logf("Refund(R1 with R2's part for k): %v", err)
					if err != nil {
						if !errors.Is(err, core.ErrInvalidCost) {
							t.Fatal(err)
						}
						return // refused, as documented
					}
					t.Errorf("a receipt with another decision's part was accepted")
					uk := e.check(l, lim, "k", "tk", "k")
					uj := e.check(l, lim, "j", "tj", "j")
					t.Logf("%s: k %d units above its twin, j %d", name, uk, uj)
				})
			}
		}
	}
}

// TestForgedPartThenOwnRefund: the same forged part, then the donor R2
// refunded too (its own receipt, whose copies R1' does not share): k and
// j get back R1's 1 as 5 and R2's 5 again, 10 for the 6 taken. The twin
// here kept neither.
func TestForgedPartThenOwnRefund(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		e := newEnv(t)
		l := e.limiter(e.client(0), "gb2")
		lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		k, j, tk, tj := lim.For("k"), lim.For("j"), lim.For("tk"), lim.For("tj")
		e.allow(l, 4, k, j, tk, tj)
		e.adv(time.Millisecond)
		r1 := e.allow(l, 1, k, j)
		e.adv(time.Millisecond)
		r2 := e.allow(l, 5, k, j)
		e.adv(time.Millisecond)
		forged := r1
		forged.Rules = []core.Result{r2.Rules[0], r1.Rules[1]}
		if err := l.Refund(ctx, forged); err != nil {
			t.Logf("%s: forged part refused: %v", alg, err)
			continue
		}
		if err := l.Refund(ctx, r2); err != nil {
			t.Fatal(err)
		}
		e.logf("refund R1' and R2")
		uk := e.check(l, lim, "k", "tk", fmt.Sprintf("%s k", alg))
		uj := e.check(l, lim, "j", "tj", fmt.Sprintf("%s j", alg))
		t.Logf("%s: k %d units above its twin, j %d", alg, uk, uj)
	}
}
