package core

import (
	"context"
	"crypto/sha1"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

// fwModel is what a period FixedWindow decides, counted in windows: the
// state's window sw (ahead of the clock's while it holds a carried debt)
// and the units c counted in it.
type fwModel struct {
	period, rate int64 // µs (rounded up to a whole ms), units
	off          int64 // µs the windows start after the epoch's multiples
	has          bool
	sw, c        int64
}

// win is the window that holds t; edge is how long after t it ends.
func (m *fwModel) win(t int64) int64  { return floorDiv(t-m.off, m.period) }
func (m *fwModel) edge(t int64) int64 { return (m.win(t)+1)*m.period + m.off - t }

// staggerOffset is where fixed_window.lua's fw_offset starts the windows
// of key within period (µs): a whole ms of SHA1's first 48 bits.
func staggerOffset(key string, period int64) int64 {
	sum := sha1.Sum([]byte(key))
	h := uint64(sum[0])<<40 | uint64(sum[1])<<32 | uint64(sum[2])<<24 | uint64(sum[3])<<16 | uint64(sum[4])<<8 | uint64(sum[5])
	return int64(h%uint64(period/1000)) * 1000
}

// at brings the model to the window w of the clock: a state of an earlier
// window is gone with its key.
func (m *fwModel) at(w int64) {
	if m.has && m.sw < w {
		m.has = false
	}
	if !m.has {
		m.sw, m.c = w, 0
	}
}

func (m *fwModel) take(w, n int64, atMost bool) (granted int64) {
	m.at(w)
	switch {
	case m.sw > w:
		return 0
	case m.c+n <= m.rate:
		granted = n
	case atMost:
		granted = max(0, m.rate-m.c)
	}
	if granted > 0 {
		m.c += granted
		m.has = true
	}
	return granted
}

func (m *fwModel) refund(w, taken, n int64) {
	m.at(w)
	if m.has && m.sw == w && taken == w {
		m.c = max(0, m.c-n)
		m.has = m.c > 0
	}
}

func (m *fwModel) charge(w, n int64) {
	m.at(w)
	m.c += n
	m.has = m.c > 0
	if m.c > m.rate {
		k := ceilDiv(m.c, m.rate) - 1
		m.sw, m.c = m.sw+k, m.c-k*m.rate
	}
}

// waits are the exact RetryAfter of n units refused at now, and what
// remains.
func (m *fwModel) waits(now, n int64) (retry, remaining int64) {
	w := m.win(now)
	m.at(w)
	end := (m.sw+1)*m.period + m.off
	if m.sw > w {
		if m.c+n <= m.rate {
			return m.sw*m.period + m.off - now, 0
		}
		return end - now, 0
	}
	return end - now, max(0, m.rate-m.c)
}

// TestFixedWindowSweep walks the fixed window's parameter space and its
// faults together: periods from 1µs (a whole ms) to a day, rates from 1 to
// 2^33, costs up to the Rate, random takes, AtMost takes, refunds and
// settlements (debts beyond many windows among them), the clock moving by
// µs, to a window's last µs, onto its edge and across windows, and the
// fault of a refund delivered after its window ended (a stalled Redis).
// Every decision is checked against fwModel: granted units and Remaining
// exactly; RetryAfter never short of the exact wait and at most 1 ms
// longer; the ResetAfter of a take to its window's end; every key keeps
// a TTL. It backs the guarantees of fixed_window.lua: at most Rate per
// window, refunds only in their window, debts carried, no key forever.
func TestFixedWindowSweep(t *testing.T) {
	ctx := context.Background()
	periods := []time.Duration{time.Microsecond, time.Millisecond, 1500 * time.Microsecond, 7 * time.Millisecond, time.Second, time.Hour, 24 * time.Hour}
	rates := []int{1, 3, 1000, maxWindowRate}
	steps, seeds := 300, uint64(4)
	if !redistest.Long() {
		steps, seeds = 60, 2
	}
	for _, period := range periods {
		for _, rate := range rates {
			for seed := range seeds {
				stagger := seed%2 == 1 // (WithStaggeredWindows)
				t.Run(fmt.Sprintf("%v/%d/seed=%d/stagger=%v", period, rate, seed, stagger), func(t *testing.T) {
					lim := Limit{Algorithm: FixedWindow, Rate: rate, Period: period}
					p, err := lim.params()
					if err != nil {
						t.Fatal(err)
					}
					mr, rdb, l := miniLimiter(t)
					rng := rand.New(rand.NewPCG(uint64(period)^seed<<40, uint64(rate)))
					m := &fwModel{period: p.period, rate: int64(rate)}
					if stagger {
						if l, err = New(rdb, WithPrefix("test"), WithTimeout(time.Minute), WithLogger(nil), WithStaggeredWindows()); err != nil {
							t.Fatal(err)
						}
						m.off = staggerOffset(stateKeys(nil, "test", "k", &staggeredWindow, 0)[0], p.period)
					}
					now := redistest.Epoch.UnixMicro()
					move := func(d int64) {
						now += d
						redistest.SetTime(mr, time.UnixMicro(now))
					}
					move(0)
					cost := func() int64 {
						switch rng.IntN(4) {
						case 0:
							return 1
						case 1:
							return int64(rate)
						default:
							return 1 + rng.Int64N(int64(rate))
						}
					}
					type receipt struct {
						r Result
						w int64
					}
					var receipts []receipt
					var trace []string
					fatalf := func(format string, args ...any) {
						t.Helper()
						t.Fatalf(format+"\nlast steps:\n%s", append(args, strings.Join(trace[max(0, len(trace)-8):], "\n"))...)
					}
					for step := range steps {
						trace = append(trace, fmt.Sprintf("  %d: t=%d w=%d model sw=%d c=%d has=%v", step, now, m.win(now), m.sw, m.c, m.has))
						w := m.win(now)
						switch op := rng.IntN(10); {
						case op < 4: // a take, or an AtMost take
							n, atMost := cost(), op == 3
							var r Result
							if atMost {
								r, err = l.AllowAtMost(ctx, int(n), lim.For("k"))
							} else {
								r, err = l.Allow(ctx, int(n), lim.For("k"))
							}
							if err != nil {
								fatalf("step %d: %v", step, err)
							}
							trace = append(trace, fmt.Sprintf("    take %d at most %v: %+v", n, atMost, r))
							need := n
							if atMost {
								need = 1
							}
							retry, _ := m.waits(now, need)
							want := m.take(w, n, atMost)
							if int64(r.Granted) != want || r.Allowed != (want > 0) {
								fatalf("step %d: n=%d at most %v: granted %d, model %d (%+v)", step, n, atMost, r.Granted, want, r)
							}
							if want > 0 {
								receipts = append(receipts, receipt{r, w})
								end := (m.sw+1)*m.period + m.off
								if d := r.ResetAfter.Microseconds() - (end - now); d < 0 || d > 1000 {
									fatalf("step %d: ResetAfter %v, the window ends in %dµs", step, r.ResetAfter, end-now)
								}
							} else if d := r.RetryAfter.Microseconds() - retry; d < 0 || d > 1000 {
								fatalf("step %d: RetryAfter %v, exact %dµs (%+v)", step, r.RetryAfter, retry, r)
							}
							if _, left := m.waits(now, 1); int64(r.Remaining) != left {
								fatalf("step %d: Remaining %d, model %d", step, r.Remaining, left)
							}
						case op < 6 && len(receipts) > 0: // a refund or a settlement, maybe late
							i := rng.IntN(len(receipts))
							rc := receipts[i]
							receipts = append(receipts[:i], receipts[i+1:]...)
							if rng.IntN(4) == 0 { // the refund reaches Redis after its window
								move(m.edge(now))
								w = m.win(now)
							}
							taken := int64(rc.r.Granted)
							used := rng.Int64N(taken + 1)
							if rng.IntN(3) == 0 {
								used = taken + rng.Int64N(int64(rate)*int64(1+rng.IntN(40)))
							}
							trace = append(trace, fmt.Sprintf("    settle taken %d (window %d) used %d at t=%d", taken, rc.w, used, now))
							if _, err := l.Settle(ctx, rc.r, int(used)); err != nil {
								fatalf("step %d: Settle: %v", step, err)
							}
							if used < taken {
								m.refund(w, rc.w, taken-used)
							} else if used > taken {
								m.charge(w, used-taken)
							}
						case op < 7:
							r, err := l.Peek(ctx, lim.For("k"))
							if err != nil {
								t.Fatal(err)
							}
							if _, left := m.waits(now, 1); int64(r.Remaining) != left {
								fatalf("step %d: Peek's Remaining %d, model %d (%+v)", step, r.Remaining, left, r)
							}
						default: // the clock moves
							switch rng.IntN(4) {
							case 0:
								move(rng.Int64N(1000))
							case 1:
								move(m.edge(now) - 1) // the window's last µs
							case 2:
								move(m.edge(now)) // onto the next window's edge
							default:
								move(m.period * rng.Int64N(3))
							}
						}
						for _, k := range mr.Keys() {
							if ttl := mr.TTL(k); ttl <= 0 {
								fatalf("step %d: %s has TTL %v", step, k, ttl)
							}
						}
					}
				})
			}
		}
	}
}

// TestFwBatchTakesSweep walks the batch's loop of one-unit takes (fw.takes
// in fixed_window.lua): batches over many keys, each key in a state of its
// own (fresh, partly spent, one unit left, full, a debt carried ahead, a
// window of another Period, a count above a lowered Rate), at window
// starts, mid-window, in a window's last ms and at tags next to the wrap
// (131071, where a packed reply nears 2^53), under Rates up to 2^33, some
// Limiters staggered. Each key has a twin decided alone at the same
// instant: the batch must reply and leave state exactly as the lone calls
// do, and a refund of each batched receipt must give back exactly as the
// twin's does. It fails if the loop packs a wrong remaining or wait (as
// base + top - v did at the wrap, past 2^53), takes a state of another
// window as the clock's, or names a wrong tag in the receipt.
func TestFwBatchTakesSweep(t *testing.T) {
	rates := []int{1, 2, 5, 1000, 1 << 33}
	periods := []time.Duration{time.Millisecond, time.Second, time.Hour, 24 * time.Hour}
	for seed := range 48 {
		rng := rand.New(rand.NewPCG(uint64(seed), 27))
		rate, period := rates[seed%len(rates)], periods[seed/len(rates)%len(periods)]
		name := fmt.Sprintf("seed=%d/rate=%d/period=%v", seed, rate, period)
		t.Run(name, func(t *testing.T) {
			p := period.Microseconds()
			// The window: its index next to the tags' wrap on some seeds.
			// (miniredis' clock, a time.Duration from now, reaches 292
			// years: 24 h windows do not wrap within it.)
			w := redistest.Epoch.UnixMicro()/p + 1 + rng.Int64N(1000)
			if jump := (131070 - w%131071 + 131071 - int64(seed/3%3)) % 131071; seed%3 == 0 && jump*p < 100*365*24*3600e6 {
				w += jump
			}
			// The instant in it: its start, its last ms, or anywhere.
			into := rng.Int64N(p)
			switch seed % 4 {
			case 1:
				into = 0
			case 2:
				into = p - 1 - rng.Int64N(min(p, 1000))
			}
			now := time.UnixMicro(w*p + into)
			opts := []Option{opsPatient, WithClock(func() time.Time { return now })}
			if seed%5 == 4 {
				opts = append(opts, WithStaggeredWindows())
			}
			// Twin servers: the batch's on a, the lone calls' on b.
			mra, rdba := redistest.Mini(t)
			mrb, rdbb := redistest.Mini(t)
			redistest.SetTime(mra, now)
			redistest.SetTime(mrb, now)
			la, lb := opsNew(t, rdba, opts...), opsNew(t, rdbb, opts...)
			ctx := context.Background()
			lim := Limit{Algorithm: FixedWindow, Rate: rate, Period: period}
			pl, err := la.plans.of(lim)
			if err != nil {
				t.Fatal(err)
			}
			row := pl.layers[0].row // (staggeredWindow, staggered)
			const keys = 14
			key := func(i int) string { return fmt.Sprintf("k%d", i) }
			for i := range keys {
				state := rng.IntN(7)
				for _, l := range []*Limiter{la, lb} {
					k := key(i)
					var err error
					switch state {
					case 1:
						_, err = l.Allow(ctx, 1+i%rate, lim.For(k))
					case 2:
						if rate > 1 {
							_, err = l.Allow(ctx, rate-1, lim.For(k))
						}
					case 3:
						_, err = l.Allow(ctx, rate, lim.For(k))
					case 4:
						_, err = l.Settle(ctx, receiptFor(l, lim.For(k), 0, 0), min(rate*(2+i%3), 1<<40))
					case 5:
						other := lim
						other.Period = period * 2
						_, err = l.Allow(ctx, 1, other.For(k))
					case 6:
						more := lim
						more.Rate = min(rate*2, 1<<33)
						_, err = l.Allow(ctx, more.Rate, more.For(k))
					}
					if err != nil {
						t.Fatalf("key %d, state %d: %v", i, state, err)
					}
				}
			}
			var calls []*pending
			for i := range keys {
				c := &pending{rq: request{key: key(i), pl: pl, n: 1, mode: modeConsume}}
				c.nkeys = copy(c.keys[:], stateKeys(nil, la.prefix, key(i), row, 0))
				calls = append(calls, c)
			}
			la.runBatch(pl, calls)
			for i, c := range calls {
				want, err := lb.Allow(ctx, 1, lim.For(key(i)))
				if err != nil || c.err != nil {
					t.Fatalf("key %d: alone: %v; batched: %v", i, err, c.err)
				}
				got := c.res[0]
				got.owner, got.rule = want.owner, want.rule
				// A batch measures its waits from the clock, a lone take
				// from its key's TTL, whole ms: up to 1 ms shorter there.
				for _, d := range [][2]*time.Duration{{&got.RetryAfter, &want.RetryAfter}, {&got.ResetAfter, &want.ResetAfter}} {
					if *d[0] >= *d[1] && *d[0] < *d[1]+time.Millisecond {
						*d[0] = *d[1]
					}
				}
				if !opsSame(got, want) {
					t.Errorf("key %d: batched %+v, alone %+v", i, got, want)
				}
				if got.Allowed {
					if err := la.Refund(ctx, got); err != nil {
						t.Fatal(err)
					}
					if err := lb.Refund(ctx, want); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range keys {
				for _, k := range stateKeys(nil, la.prefix, key(i), row, 0) {
					ga, gb := stateOf(t, mra, k), stateOf(t, mrb, k)
					if ga != gb || mra.TTL(k) != mrb.TTL(k) {
						t.Errorf("key %d: batched left %s = %s (TTL %v), alone %s (TTL %v)", i, k, ga, mra.TTL(k), gb, mrb.TTL(k))
					}
					if mra.Exists(k) && mra.TTL(k) <= 0 {
						t.Errorf("key %d: %s has no TTL", i, k)
					}
				}
			}
		})
	}
}
