package envoylimit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestSweep walks algorithms x rates (up to the format's bound, 2^32-1) x
// descriptors per request (1 to 11: one call of the Limiter, and several)
// x hits_addend (0, 1, the limit, past it, 2^64-1) x overdraft or not x
// Redis faults, against a model of what each key has left (miniredis'
// clock stands still, so nothing refills): a request is admitted exactly
// when every descriptor's hits fit what its key has left, and then takes
// them from each; refused or failed, it takes nothing, whichever of its
// calls refused or failed, except that an overdraft key (k0, k1) of a
// request the others admit is charged in full, below zero if need be.
func TestSweep(t *testing.T) {
	for _, alg := range []string{"fixed_window", "token_bucket", "sliding_window", "sliding_window_counter"} {
		for _, rate := range []uint64{1, 7, 1<<32 - 1} { // requests_per_unit is a uint32
			for _, envoyMode := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d/envoy=%v", alg, rate, envoyMode), func(t *testing.T) {
					sweep(t, alg, rate, envoyMode)
				})
			}
		}
	}
}

// model is what each key has left; an overdraft key's runs below zero.
type model struct {
	rate uint64
	left map[string]int64
}

func (m *model) has(key string) int64 {
	if _, ok := m.left[key]; !ok {
		m.left[key] = int64(m.rate)
	}
	return m.left[key]
}

// decide is what the service must answer a request of these hits by key
// (summed; looks says which keys a descriptor of hits_addend 0 named), and
// what it must then count, applied by commit.
func (m *model) decide(want map[string]uint64, looks map[string]bool) (admitted bool, commit func()) {
	fits, owed := true, true
	for key, h := range want {
		left := m.has(key)
		switch {
		case looks[key] && left <= 0, left < 0, h > uint64(left):
			if overdraft(key) && h > 0 {
				owed = false
			} else {
				fits = false
			}
		}
	}
	return fits && owed, func() {
		if !fits {
			return
		}
		for key, h := range want {
			if overdraft(key) || owed {
				m.left[key] = max(m.left[key]-int64(min(h, 1<<40)), -1<<62)
			}
		}
	}
}

func overdraft(key string) bool {
	return strings.HasPrefix(key, "k0=") || strings.HasPrefix(key, "k1=")
}

func sweep(t *testing.T, alg string, rate uint64, envoyMode bool) {
	mr, rdb := redistest.Mini(t)
	var conf strings.Builder
	fmt.Fprintf(&conf, "domain: s\ndescriptors:\n")
	for i := range 4 {
		fmt.Fprintf(&conf, "  - key: k%d\n    rate_limit: {unit: hour, requests_per_unit: %d, algorithm: %s, overdraft: %v}\n", i, rate, alg, i < 2)
	}
	r := start(t, rdb, map[string]string{"s.yaml": conf.String()}, Config{EnvoyFailureMode: envoyMode}, core.WithBreaker(0, 0))
	m := &model{rate: rate, left: map[string]int64{}}
	rng := rand.New(rand.NewPCG(rate, uint64(len(alg))))
	hits := []uint64{0, 1, 1, 2, rate, rate + 1, 1<<64 - 1}
	for step := range 60 {
		ds := make([]*rlv3.RateLimitDescriptor, 1+rng.IntN(11))
		want, looks := map[string]uint64{}, map[string]bool{}
		for i := range ds {
			key := fmt.Sprintf("k%d=v%d", rng.IntN(4), rng.IntN(3))
			h := hits[rng.IntN(len(hits))]
			ds[i] = d(key)
			ds[i].HitsAddend = wrapperspb.UInt64(h)
			if want[key] += h; want[key] < h {
				want[key] = 1<<64 - 1
			}
			looks[key] = looks[key] || h == 0
		}
		fits, commit := m.decide(want, looks)
		fault := rng.IntN(5) == 0
		if fault {
			mr.SetError("LOADING Redis is loading the dataset in memory")
		}
		resp, err := r.try("s", 0, ds...)
		mr.SetError("")
		checkSweep(t, step, fault, fits, envoyMode, resp, err)
		if !fault {
			commit()
		}
		for key := range want { // what Redis holds is what the model says
			peek := d(key)
			peek.HitsAddend = wrapperspb.UInt64(0)
			st := r.ask(t, "s", peek).GetStatuses()[0]
			if l := max(m.left[key], 0); int64(st.GetLimitRemaining()) != min(l, 1<<32-1) {
				t.Fatalf("step %d: %s has %d left, the model %d", step, key, st.GetLimitRemaining(), m.left[key])
			}
		}
	}
}

func checkSweep(t *testing.T, step int, fault, fits, envoyMode bool, resp *rlsv3.RateLimitResponse, err error) {
	t.Helper()
	switch {
	case fault && !fits:
		// refused, whether or not Redis was asked: a hits_addend
		// above a limit needs no Redis
		if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("step %d (fault): %s; want refused", step, spell(resp))
		}
	case fault && envoyMode:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("step %d (fault, EnvoyFailureMode): %v; want UNAVAILABLE", step, err)
		}
	case fault:
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("step %d (fault): %s, %v; want OVER_LIMIT", step, spell(resp), err)
		}
	case err != nil:
		t.Fatalf("step %d: %v", step, err)
	case (resp.GetOverallCode() == rlsv3.RateLimitResponse_OK) != fits:
		t.Fatalf("step %d: %s; want admitted %v", step, spell(resp), fits)
	}
}
