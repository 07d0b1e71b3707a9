package givebackattack2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// TestRefundTwice: "Refund or settle a receipt once" (Refund's godoc). A
// receipt of several Rules remembers in its copies what was given back;
// one of one Rule does not, and the script cannot tell a second give-back
// of a take from the first: this measures by how much a second Refund (a
// retry after a timeout, say) lifts the key above its twin. Expected: 0
// for several Rules (the documented guarantee); the one-Rule figure is
// the documented risk, logged, and fails only if it exceeds the take.
func TestRefundTwice(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, several := range []bool{false, true} {
			for _, gap := range []time.Duration{0, time.Microsecond, 10 * time.Millisecond} {
				name := fmt.Sprintf("%s/several=%v/gap=%v", alg, several, gap)
				t.Run(name, func(t *testing.T) {
					e := newEnv(t)
					l := e.limiter(e.client(0), "gb2")
					lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
					user, twin := lim.For("user"), lim.For("twin")
					e.allow(l, 5, user, twin)
					rules := []core.Rule{user}
					if several {
						rules = append(rules, lim.For("side"))
					}
					a := e.allow(l, 3, rules...)
					e.adv(gap)
					if err := l.Refund(ctx, a); err != nil {
						t.Fatal(err)
					}
					e.adv(gap)
					copyOf := a // a copy, as a retry would hold
					if err := l.Refund(ctx, copyOf); err != nil {
						t.Fatal(err)
					}
					units, lvl, _, _ := above(t, l, lim, "user", "twin")
					t.Logf("%s: after two Refunds of one take of 3: %d units (%v) above the twin", name, units, lvl)
					if several && (units > 0 || lvl > 0) {
						t.Errorf("%s: a receipt of several Rules gave back twice: %d units above", name, units)
					}
					if units > 3 {
						t.Errorf("%s: %d above for a take of 3", name, units)
					}
				})
			}
		}
	}
}
