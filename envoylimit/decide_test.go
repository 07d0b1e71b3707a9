package envoylimit

import (
	"fmt"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/redlimit/redlimit/internal/redistest"
)

// step is one request and the answer it must get (see spell).
type step struct {
	domain string
	descs  []string
	want   string
}

func runSteps(t *testing.T, r *rig, steps []step) {
	t.Helper()
	for i, s := range steps {
		ds := make([]*rlv3.RateLimitDescriptor, len(s.descs))
		for j, spec := range s.descs {
			ds[j] = d(spec)
		}
		if got := spell(r.ask(t, s.domain, ds...)); got != s.want {
			t.Errorf("step %d %s %v: got %q, want %q", i, s.domain, s.descs, got, s.want)
		}
	}
}

func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestDecisionsBasic(t *testing.T) {
	_, rdb := redistest.Mini(t)
	r := start(t, rdb, map[string]string{"messaging.yaml": `
domain: messaging
descriptors:
  # 5 marketing messages a day to a number
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # 100 messages a day to any number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`}, Config{})
	both := []string{"message_type=marketing,to_number=1", "to_number=1"}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{"messaging", both, fmt.Sprintf("OK; OK %d/5; OK %d/100", 4-i, 99-i)})
	}
	steps = append(steps,
		step{"messaging", both, "OVER; OVER 0/5; OK 95/100"},
		// the refused request took nothing from to_number=1
		step{"messaging", []string{"to_number=1"}, "OK; OK 94/100"},
		step{"messaging", []string{"to_number=2"}, "OK; OK 99/100"},
		// unknown: domain, key, value under a key without default, deeper path
		step{"nope", []string{"to_number=1"}, "OK; OK"},
		step{"messaging", []string{"from=1"}, "OK; OK"},
		step{"messaging", []string{"message_type=transactional,to_number=1"}, "OK; OK"},
		step{"messaging", []string{"to_number=1,extra=1"}, "OK; OK"},
		step{"messaging", []string{"message_type=marketing"}, "OK; OK"},
	)
	runSteps(t, r, steps)
}
