package givebackattack2

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestReceiptOfAnotherStoreSamePrefix: a receipt's check covers the
// prefix, key, algorithm, layer and Granted, not the Redis: a Limiter of
// the same prefix on another Redis (or another database of the same one)
// takes the receipt and gives its units back to a key they were never
// taken from. docs/limits.md#receipts says so, and that Limiters of one
// prefix share receipts on purpose (one batching, one not). This holds
// the damage to what the docs say: at most the receipt's Granted.
//
//	store B: kept take of 5 from k        B's k at 5
//	store A: R = take of 5 from k
//	B.Refund(R)                           B's k at 10: 5 units above
func TestReceiptOfAnotherStoreSamePrefix(t *testing.T) {
	ctx := context.Background()
	for _, alg := range buckets {
		for _, where := range []string{"another miniredis", "another database"} {
			t.Run(fmt.Sprintf("%s/%s", alg, where), func(t *testing.T) {
				e := newEnv(t)
				la := e.limiter(e.client(0), "gb2")
				var lb *core.Limiter
				if where == "another database" {
					lb = e.limiter(e.client(1), "gb2")
				} else {
					e2 := newEnv(t)
					redistest.SetTime(e2.mr, e.t0)
					lb = e.limiter(e2.client(0), "gb2")
				}
				lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
				e.allow(lb, 5, lim.For("k"), lim.For("twin"))
				r := e.allow(la, 5, lim.For("k"))
				err := lb.Refund(ctx, r)
				e.logf("B.Refund(A's receipt): %v", err)
				if errors.Is(err, core.ErrInvalidCost) {
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				units, _, _, _ := above(t, lb, lim, "k", "twin")
				t.Logf("%s %s: B took A's receipt (documented): B's key %d units above the state it had", alg, where, units)
				if units > r.Granted {
					t.Errorf("%s %s: %d units above, more than the receipt's Granted %d", alg, where, units, r.Granted)
				}
			})
		}
	}
}
