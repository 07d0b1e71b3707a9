package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestPersistedKeyHeals backs "no Redis key of ours lives forever,
// whatever an operator does": after PERSIST of every key of a state (an
// operator, a restore without TTLs), the next decisions succeed, keep the
// count, and give the keys an expiry again, under every algorithm, on
// miniredis and a real Redis. Before, a FixedWindow key without a TTL
// failed every call for good (87 of 87 in issue 35) and never expired.
func TestPersistedKeyHeals(t *testing.T) {
	ctx := context.Background()
	for _, server := range []string{"mini", "real"} {
		for _, a := range Algorithms() {
			t.Run(server+"/"+a.String(), func(t *testing.T) {
				var rdb redis.UniversalClient
				if server == "mini" {
					_, rdb = redistest.Mini(t)
				} else {
					rdb = redistest.Real(t)
				}
				prefix := fmt.Sprintf("persist%d", time.Now().UnixNano())
				t.Cleanup(func() { dropPrefix(t, rdb, prefix) })
				l := opsNew(t, rdb, WithPrefix(prefix), opsPatient)
				lim := with(PerHour(5), a)
				if a == Concurrency {
					lim = InFlight(5)
				}
				if r, err := l.Allow(ctx, 1, lim.For("k")); err != nil || !r.Allowed {
					t.Fatalf("the first take: %+v, %v", r, err)
				}
				keys, err := rdb.Keys(ctx, prefix+":*").Result()
				if err != nil || len(keys) == 0 {
					t.Fatalf("the state's keys: %v, %v", keys, err)
				}
				for _, k := range keys {
					if err := rdb.Persist(ctx, k).Err(); err != nil {
						t.Fatal(err)
					}
				}
				for i := range 2 {
					r, err := l.Allow(ctx, 1, lim.For("k"))
					if err != nil || !r.Allowed || r.Remaining != 3-i {
						t.Fatalf("take %d after PERSIST: %+v, %v; want admitted with %d left", i+2, r, err, 3-i)
					}
				}
				keys, _ = rdb.Keys(ctx, prefix+":*").Result()
				for _, k := range keys {
					if ttl, err := rdb.PTTL(ctx, k).Result(); err != nil || ttl < 0 {
						t.Errorf("%s: PTTL %v, %v; want an expiry again", k, ttl, err)
					}
				}
			})
		}
	}
}
