package envoylimit

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestEndToEnd runs the decision scenarios through gRPC on the real Redis
// of REDIS_URL and the Redis Cluster of REDIS_CLUSTER_ADDRS. Their clocks
// run, so every window is an hour long, and a scenario starts clear of an
// hour's end.
func TestEndToEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		rdb  func(testing.TB) redis.UniversalClient
	}{
		{"redis", func(t testing.TB) redis.UniversalClient { return redistest.Real(t) }},
		{"cluster", func(t testing.TB) redis.UniversalClient { return redistest.Cluster(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb := tt.rdb(t)
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					clearOfHourEnd(t, rdb)
					sc.run(t, func(files map[string]string, cfg Config) *rig { return start(t, rdb, hourly(files), cfg) })
				})
			}
		})
	}
}

// hourly makes windows of a second or a minute an hour long.
func hourly(files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	r := strings.NewReplacer("unit: second", "unit: hour", "unit: Second", "unit: hour", "unit: minute", "unit: hour")
	for name, body := range files {
		out[name] = r.Replace(body)
	}
	return out
}

// clearOfHourEnd waits, if Redis' clock is within 20 s of an hour's end
// (where every window of the scenarios ends: day, week, month and year
// windows end at midnight UTC), for the next hour to begin.
func clearOfHourEnd(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	for i := 0; i < 30; i++ {
		now := redistest.Now(t, rdb)
		if time.Hour-now.Sub(now.Truncate(time.Hour)) > 20*time.Second {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatal("Redis' clock stayed at an hour's end for 30 s")
}
