package givebackattack

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// twin runs two keys through one history but for the takes given back:
// "user" gets every take, "twin" only those kept (in the same script call
// as user's, so at the same instant and only if both admit). twin is then
// the state user would have had without the given-back takes, whatever
// the Limits did meanwhile, and user must never stand above it.
type twin struct {
	e         *env
	user, tw  string
	lastLimit core.Limit
}

func newTwin(e *env) *twin { return &twin{e: e, user: "user", tw: "twin"} }

// next gives p fresh keys, and e a fresh log, for another case on e.
func (p *twin) next(i int) {
	p.user, p.tw = fmt.Sprintf("user%d", i), fmt.Sprintf("twin%d", i)
	p.e.log = nil
}

// kept takes n from both keys under lim.
func (p *twin) kept(lim core.Limit, n int) {
	p.e.t.Helper()
	r, err := p.e.l.Allow(context.Background(), n, lim.For(p.user), lim.For(p.tw))
	if err != nil {
		p.e.t.Fatal(err)
	}
	p.lastLimit = lim
	p.e.logf("kept take %d under %v: %v (Remaining %d/%d)", n, lim, r.Allowed, r.Rules[0].Remaining, r.Rules[1].Remaining)
}

// solo takes n from user alone under lim: a take to give back.
func (p *twin) solo(lim core.Limit, n int, name string) core.Result {
	p.e.t.Helper()
	r, err := p.e.l.Allow(context.Background(), n, lim.For(p.user))
	if err != nil {
		p.e.t.Fatal(err)
	}
	p.lastLimit = lim
	p.e.logf("take %s: %d under %v: %v (Remaining %d)", name, n, lim, r.Allowed, r.Remaining)
	return r
}

func (p *twin) refund(r core.Result, name string) {
	p.e.t.Helper()
	if err := p.e.l.Refund(context.Background(), r); err != nil {
		p.e.t.Fatal(err)
	}
	p.e.logf("refund %s", name)
}

// check reads both keys under lim in one call and fails when user stands
// above twin: more Remaining, or a shorter ResetAfter (the level to the
// µs: more tokens, or a shorter queue).
func (p *twin) check(lim core.Limit, what string) (user, tw core.Result) {
	p.e.t.Helper()
	r, err := p.e.l.Peek(context.Background(), lim.For(p.user), lim.For(p.tw))
	if err != nil {
		p.e.t.Fatal(err)
	}
	user, tw = r.Rules[0], r.Rules[1]
	if user.Remaining > tw.Remaining || user.ResetAfter < tw.ResetAfter {
		p.e.t.Errorf("%s: user at Remaining %d, ResetAfter %v: above %d, %v, the state without the units given back\n%s",
			what, user.Remaining, user.ResetAfter, tw.Remaining, tw.ResetAfter, strings.Join(p.e.log, "\n"))
	}
	return user, tw
}

// TestOverlapInterleavings: every order of take A (2 units, given back),
// take B (1, given back), take C (1, kept) and the refunds of A and B, with
// gaps between consecutive steps from none to a full refill, on a
// bucket of 4 at 10/s, full or nearly empty at the start: user must end at
// or below twin after every refund.
func TestOverlapInterleavings(t *testing.T) {
	gaps := []time.Duration{0, time.Microsecond, 150 * time.Millisecond, 1200 * time.Millisecond}
	orders := orders5()
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 4}
		for _, start := range []int{0, 1} {
			fails, cases := 0, 0
			e := newEnv(t)
			p := newTwin(e)
			for oi, order := range orders {
				for _, gi := range gapCombos(len(gaps), uint64(oi)) {
					var gs [4]time.Duration
					for j, x := 0, gi; j < 4; j, x = j+1, x/len(gaps) {
						gs[j] = gaps[x%len(gaps)]
					}
					p.next(cases)
					cases++
					e.adv(time.Second) // apart from the last case (fresh keys anyway)
					if start > 0 {
						p.kept(lim, start)
					}
					var a, b core.Result
					for k, op := range order {
						if k > 0 {
							e.adv(gs[k-1])
						}
						switch op {
						case "tA":
							a = p.solo(lim, 2, "A")
						case "tB":
							b = p.solo(lim, 1, "B")
						case "tC":
							p.kept(lim, 1)
						case "rA":
							p.refund(a, "A")
						case "rB":
							p.refund(b, "B")
						}
						if op[0] == 'r' {
							p.check(lim, fmt.Sprintf("%s start %d, %v, gaps %v", alg, start, order, gs))
						}
					}
					if t.Failed() {
						if fails++; fails > 3 {
							t.FailNow()
						}
					}
				}
			}
		}
	}
}

// gapCombos is which of the k^4 gap combinations a run tries: all with
// GIVEBACK_ALL set (about 100 s), else 24 per order (seed), the same
// every run.
func gapCombos(k int, seed uint64) []int {
	all := rand.New(rand.NewPCG(seed, 2)).Perm(k * k * k * k)
	if os.Getenv("GIVEBACK_ALL") != "" {
		return all
	}
	return all[:24]
}

// orders5 is every order of tA, tB, tC, rA, rB with each take before its
// refund.
func orders5() [][]string {
	var out [][]string
	ops := []string{"tA", "tB", "tC", "rA", "rB"}
	var rec func(cur []string, used []bool)
	rec = func(cur []string, used []bool) {
		if len(cur) == len(ops) {
			out = append(out, append([]string(nil), cur...))
			return
		}
		for i, op := range ops {
			if used[i] || op == "rA" && !used[0] || op == "rB" && !used[1] {
				continue
			}
			used[i] = true
			rec(append(cur, op), used)
			used[i] = false
		}
	}
	rec(nil, make([]bool, len(ops)))
	return out
}

// TestRefundAfterExpiry: takes before A, take A, the bucket refills to
// full and its key expires, other takes recreate it, then A is refunded.
// Without A the bucket would also have been full, so nothing may come
// back above the other takes. The sizes sweep how many units the old key
// had counted at A and the new key counts by the refund, so that a count
// of units taken since A, read from a state that restarted at zero, would
// come out at zero (or below) whatever it counts from.
func TestRefundAfterExpiry(t *testing.T) {
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		e := newEnv(t)
		p := newTwin(e)
		lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		i := 0
		for before := range 3 {
			for _, size := range []int{1, 3} {
				for _, again := range [][]int{{1}, {size}, {before + size}, {before, size}, {4}} {
					for _, after := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond} {
						p.next(i)
						i++
						e.adv(2 * time.Second)
						if before > 0 {
							p.kept(lim, before)
						}
						a := p.solo(lim, size, "A")
						e.adv(time.Second) // full again: the key's TTL ends here
						if e.mr.Exists("gba:{"+p.user+"}:tb3") || e.mr.Exists("gba:{"+p.user+"}:lb3") {
							t.Logf("%s: the key outlived its refill (%v)", alg, e.mr.Keys())
						}
						for _, n := range again {
							if n > 0 {
								p.kept(lim, n)
							}
						}
						e.adv(after)
						p.refund(a, "A")
						p.check(lim, fmt.Sprintf("%s: %d kept, A %d, expiry, %v kept, refund %v later", alg, before, size, again, after))
					}
				}
			}
		}
	}
}

// TestRefundAfterRefillAndCharge: take A, the bucket refills to full (A
// is forgotten: the bucket without it is full too), then a Settle charges
// units that were never taken (a Peek's receipt: Settle charges all of
// used), then A is refunded. A give-back that counted only the units
// taken since A, not those charged, would find nothing taken since and
// give A back whole on top of the charge.
func TestRefundAfterRefillAndCharge(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		e := newEnv(t)
		p := newTwin(e)
		lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
		i := 0
		for _, size := range []int{1, 3} {
			for _, charge := range []int{1, 3, 5, 12} {
				for _, refill := range []time.Duration{100 * time.Millisecond, time.Second} {
					p.next(i)
					i++
					e.adv(2 * time.Second)
					a := p.solo(lim, size, "A")
					e.adv(refill)
					peek, err := e.l.Peek(ctx, lim.For(p.user), lim.For(p.tw))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := e.l.Settle(ctx, peek, charge); err != nil {
						t.Fatal(err)
					}
					e.logf("charge %d to both", charge)
					p.refund(a, "A")
					p.check(lim, fmt.Sprintf("%s: A %d, %v, charge %d", alg, size, refill, charge))
				}
			}
		}
	}
}

// TestBatchedReceipts: 16 callers take at one instant, so that their
// decisions share script calls (the test checks that some did); then the
// bucket is left to refill part or all of the way, others take, and the
// batched receipts are given back in several orders. Each batched
// receipt names one decision of a shared call: a give-back that took a
// batch-mate's position for its own would count the wrong units as taken
// since it.
func TestBatchedReceipts(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		for _, refill := range []time.Duration{0, 300 * time.Millisecond, 3 * time.Second} {
			for _, order := range []string{"forward", "backward", "alternate"} {
				e := newEnv(t)
				p := newTwin(e)
				var calls atomic.Int64
				e.rdb.AddHook(countHook{&calls})
				lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second, Burst: 30}
				p.kept(lim, 2)
				calls.Store(0)
				const k = 16
				out := make([]core.Result, k)
				var wg sync.WaitGroup
				for i := range k {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r, err := e.l.Allow(ctx, 1+i%2, lim.For(p.user))
						if err != nil || !r.Allowed {
							t.Error(r, err)
						}
						out[i] = r
					}()
				}
				wg.Wait()
				if c := calls.Load(); c >= k {
					t.Logf("%s: %d callers made %d script calls: none batched", alg, k, c)
				}
				e.logf("%d batched takes of 1 or 2 (%d script calls)", k, calls.Load())
				e.adv(refill)
				p.kept(lim, 3)
				idx := make([]int, k)
				for i := range idx {
					switch order {
					case "forward":
						idx[i] = i
					case "backward":
						idx[i] = k - 1 - i
					default:
						idx[i] = (i * 5) % k
					}
				}
				for j, i := range idx {
					p.refund(out[i], fmt.Sprintf("#%d", i))
					if j == k/2 {
						p.kept(lim, 1)
					}
					p.check(lim, fmt.Sprintf("%s refill %v %s: after #%d", alg, refill, order, i))
				}
			}
		}
	}
}

// countHook counts the script calls a client sends.
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "fcall", "evalsha", "eval":
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRefundAfterReset: a refund of a take made before a Reset of its key,
// landing in the fresh state, gives nothing back: the fresh state's epoch
// is after the take (before the epoch, take 3, Reset, take 5, refund the
// 3 ended 3 units above the state without the take). On a clock that
// stands still (after = 0: the Reset and the fresh take at the take's
// very µs), the epoch cannot tell the take from its own; the test then
// holds only Reset's bound ("the quota is then at most whole") and logs
// how far above the key ends.
func TestRefundAfterReset(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		for _, after := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond, time.Second} {
			e := newEnv(t)
			lim := core.Limit{Algorithm: alg, Rate: 10, Period: time.Second}
			user := lim.For("user")
			b := newBucket(lim)
			a, err := e.l.Allow(ctx, 3, user)
			if err != nil || !a.Allowed {
				t.Fatal(a, err)
			}
			b.take(e.us(), 3)
			if err := e.l.Reset(ctx, "user"); err != nil {
				t.Fatal(err)
			}
			b.events = append(b.events, event{at: e.us(), reset: true})
			e.adv(after)
			r, err := e.l.Allow(ctx, 5, user)
			if err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			b.take(e.us(), 5)
			if err := e.l.Refund(ctx, a); err != nil {
				t.Fatal(err)
			}
			got, res := e.level(user, b)
			want := b.level(e.us())
			if res.Remaining > lim.Capacity() {
				t.Errorf("%s: Remaining %d above the capacity %d", alg, res.Remaining, lim.Capacity())
			}
			if after > 0 && got > want {
				t.Errorf("%s: take 3, Reset, %v later take 5, refund the 3: key %.3f units above the state without the take",
					alg, after, float64(got-want)/float64(b.per))
			}
			t.Logf("%s: take 3, Reset, %v later take 5, refund the 3: key at %.3f units, %.3f without the take (%.3f above)",
				alg, after, float64(got)/float64(b.per), float64(want)/float64(b.per), float64(got-want)/float64(b.per))
		}
	}
}

// TestRefundAfterLimitChange: take A under one Limit, the key's Limit
// changes (the next call names another), someone takes under the new
// Limit, then A's receipt, which gives back under the Limit it was taken
// under (docs/limits.md#receipts), is refunded. The key must not end
// above its twin, which saw the same Limits and takes but not A.
func TestRefundAfterLimitChange(t *testing.T) {
	type change struct {
		name     string
		from, to core.Limit
	}
	changes := []change{
		{"burst 10 to 3", core.Limit{Rate: 10, Period: time.Second}, core.Limit{Rate: 10, Period: time.Second, Burst: 3}},
		{"burst 3 to 10", core.Limit{Rate: 10, Period: time.Second, Burst: 3}, core.Limit{Rate: 10, Period: time.Second}},
		{"rate 10/s to 20/s", core.Limit{Rate: 10, Period: time.Second}, core.Limit{Rate: 20, Period: time.Second}},
		{"rate 20/s to 5/s", core.Limit{Rate: 20, Period: time.Second}, core.Limit{Rate: 5, Period: time.Second}},
		{"period 10/s to 10/2s", core.Limit{Rate: 10, Period: time.Second}, core.Limit{Rate: 10, Period: 2 * time.Second}},
		{"period 10/2s to 10/s", core.Limit{Rate: 10, Period: 2 * time.Second}, core.Limit{Rate: 10, Period: time.Second}},
		{"10/s to 3/300ms", core.Limit{Rate: 10, Period: time.Second}, core.Limit{Rate: 3, Period: 300 * time.Millisecond}},
	}
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		for _, c := range changes {
			from, to := c.from, c.to
			from.Algorithm, to.Algorithm = alg, alg
			for _, pre := range []int{0, 1} {
				for _, g1 := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond} {
					for _, g2 := range []time.Duration{0, time.Microsecond, 50 * time.Millisecond} {
						e := newEnv(t)
						p := newTwin(e)
						if pre > 0 {
							p.kept(from, pre)
						}
						a := p.solo(from, 2, "A")
						e.adv(g1)
						p.kept(to, 1)
						e.adv(g2)
						// A kept take under A's Limit at the refund's instant:
						// the refund's own call, under that Limit, then refills
						// no time at that Limit's rate, which the twin, read
						// under the new Limit, would not have.
						p.kept(from, 1)
						p.refund(a, "A")
						p.check(to, fmt.Sprintf("%s %s, kept %d before, gaps %v %v", alg, c.name, pre, g1, g2))
					}
				}
			}
		}
	}
}

// TestLeasesLeaveBucketsAlone: WithLeases leases only the windows
// (lease.go: a token taken at one instant and spent at another could join
// a burst the bucket would refuse), so no bucket receipt comes from a
// lease and every bucket give-back is the script's. Were buckets leased,
// their give-backs (lease.giveBack, stamped with the lease's take) would
// need the attacks above again.
func TestLeasesLeaveBucketsAlone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	l, err := core.New(e.rdb, core.WithPrefix("gba"), core.WithLogger(nil), core.WithLocalFallback(0, 0), core.WithLeases(0.5))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		lim := core.Limit{Algorithm: alg, Rate: 1000, Period: time.Second}
		for i := range 50 {
			r, err := l.Allow(ctx, 1, lim.For("leased"))
			if err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			if r.Leased {
				t.Fatalf("%s: take %d was Leased", alg, i)
			}
		}
	}
}
