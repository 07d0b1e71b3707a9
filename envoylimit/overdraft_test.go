package envoylimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// overdrafts is a token budget charged after each response, as Envoy
// charges it with apply_on_stream_done (Envoy AI Gateway's token limits):
// a look with hits_addend 0 before the request, the response's cost
// after. "plain" is the same budget without overdraft.
const overdrafts = `domain: o
descriptors:
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 100, overdraft: true}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100, overdraft: true}
`

// TestOverdraft: a cost that does not fit an overdraft limit is refused
// and charged anyway, so that the next look is refused until the debt is
// paid; without overdraft the same charge counts nowhere and the budget
// never runs out. In a request the other descriptors refuse it counts
// nothing; in one they admit, it counts even when it refuses (and they
// then count nothing).
func TestOverdraft(t *testing.T) {
	for _, rdb := range []struct {
		name  string
		start func(t *testing.T) *rig
	}{
		{"miniredis", func(t *testing.T) *rig {
			_, c := redistest.Mini(t)
			return start(t, c, map[string]string{"o.yaml": overdrafts}, Config{})
		}},
		{"cluster", func(t *testing.T) *rig {
			return start(t, redistest.Cluster(t), map[string]string{"o.yaml": overdrafts}, Config{})
		}},
	} {
		t.Run(rdb.name, func(t *testing.T) {
			r := rdb.start(t)
			runSteps(t, r, []step{
				{"o", []string{"tokens=a+0"}, "OK; OK 100/100"},
				{"o", []string{"tokens=a+60"}, "OK; OK 40/100"},
				{"o", []string{"tokens=a+0"}, "OK; OK 40/100"},
				{"o", []string{"tokens=a+70"}, "OVER; OVER 0/100"}, // charged: 30 owed
				{"o", []string{"tokens=a+0"}, "OVER; OVER 0/100"},
				{"o", []string{"tokens=b+5000"}, "OVER; OVER 0/100"}, // above the limit: owed too
				{"o", []string{"tokens=b+0"}, "OVER; OVER 0/100"},
				{"o", []string{"tokens=c+18446744073709551615"}, "OVER; OVER 0/100"},
				// without overdraft the charge that does not fit counts nowhere
				{"o", []string{"plain=a+60"}, "OK; OK 40/100"},
				{"o", []string{"plain=a+70"}, "OVER; OVER 40/100"},
				{"o", []string{"plain=a+0"}, "OK; OK 40/100"},
				// the others admit: the overdraft refuses, is charged, and they count nothing
				{"o", []string{"user=u+1", "tokens=d+150"}, "OVER; OK 2/2; OVER 0/100"},
				{"o", []string{"user=u+0", "tokens=d+0"}, "OVER; OK 2/2; OVER 0/100"},
				// the others refuse: the overdraft is not asked, and counts nothing
				{"o", []string{"user=v+3", "tokens=e+10"}, "OVER; OVER 0/2; OK"},
				{"o", []string{"tokens=e+0"}, "OK; OK 100/100"},
				// shadow: charged, never refusing
				{"o", []string{"watch=a+150"}, "OK; OK 0/100"},
				{"o", []string{"watch=a+0"}, "OK; OK 0/100"},
			})
		})
	}
}

// TestOverdraftRedisDown: an overdraft descriptor Redis' failure left
// undecided is refused with its limit, as any other, not answered as a
// descriptor nobody asked.
func TestOverdraftRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	r := start(t, rdb, map[string]string{"o.yaml": overdrafts}, Config{},
		core.WithTimeout(100*time.Millisecond), core.WithBreaker(0, 0))
	srv.Kill()
	if got := spell(r.ask(t, "o", d("tokens=a+5"))); got != "OVER; OVER 0/100" {
		t.Errorf("Redis down: %s; want refused, with its limit", got)
	}
}
