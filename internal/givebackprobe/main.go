// Command givebackprobe measures, from outside package core and against a
// real Redis Cluster, how many units a bucket give-back loses under
// contention (issue 35, item 1), for TokenBucket and LeakyBucket:
//
//   - slot: units lost per request that a later Cluster slot refused. A
//     user Rule comes first; a global Rule, in another slot and exhausted
//     beforehand, refuses every request, so each request takes a unit from
//     the user key and then gives it back. Many goroutines do this at once
//     on one user key.
//   - refund: how many of N Refunds, each issued -delay after its take,
//     come back while other goroutines keep taking from the same key.
//
// The model is a twin key: same Limit, same hash tag (so same slot, and
// the same script call, hence the same Redis instant) as the user key. It
// receives every take the user key keeps (the pre-drain, the others'
// takes: Allow(n, user, twin), all or nothing) and none that is given
// back. Its state is therefore exactly the state the user key would have
// had if the given-back takes had never happened, capping at capacity
// included. Units lost = twin.Remaining - user.Remaining from one
// Peek(user, twin) right after the last give-back (exact within one unit:
// Remaining is floored, and the two keys' fractions of a unit differ). A
// negative loss is a user key ABOVE its counterfactual: a give-back gave
// back more than was taken ("never above" broken), which the program flags.
//
// In slot, the first run's Burst is large (1e6, pre-drained to half) so
// that the bucket never refills to full during a run: at capacity both keys
// stand full and a loss would be hidden by the cap, so lost / refusals is
// the mean loss per refusal. The second run's is the bucket (burst
// = rate = 1000, pre-drained to half): its twin refills to full, and the
// figures are the user key's deficit at the end and how many requests the
// user key itself refused, having lost its units to the refusals. In
// refund, others keep the bucket near empty for the same reason.
//
//	go run ./internal/givebackprobe -addrs 127.0.0.1:6430,127.0.0.1:6431,127.0.0.1:6432
//	go run ./internal/givebackprobe -addrs ... -only slot -runs 3 -refusals 4000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

var (
	addrs    = flag.String("addrs", "127.0.0.1:6430,127.0.0.1:6431,127.0.0.1:6432", "seed addresses of a Redis Cluster of your own")
	only     = flag.String("only", "", "slot or refund: run one measurement (default both)")
	algs     = flag.String("algs", "token,leaky", "algorithms: token, leaky")
	runs     = flag.Int("runs", 3, "runs of each measurement")
	refusals = flag.Int("refusals", 4000, "slot: refused requests per run")
	workers  = flag.Int("g", 16, "slot: concurrent goroutines")
	rate     = flag.Int("rate", 1000, "slot: the user Limit's rate per second")
	bursts   = flag.String("burst", "1000000,1000", "slot: the user Limit's bursts, one run each: large, so that the bucket never caps and the loss is the sum of the losses; the rate, the issue's bucket")
	refunds  = flag.Int("n", 40, "refund: refunds per run")
	rrate    = flag.Int("rrate", 100, "refund: the Limit's rate per second (burst = rate)")
	delay    = flag.Duration("delay", 20*time.Millisecond, "refund: time from a take to its Refund")
	others   = flag.Int("others", 2, "refund: goroutines that keep taking")
	every    = flag.Duration("every", 10*time.Millisecond, "refund: each other goroutine takes once every")
	refunder = flag.Int("refunders", 1, "refund: goroutines that take and refund (n split among them)")
)

func main() {
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*addrs, ","), ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		fail("cluster %s: %v", *addrs, err)
	}
	l, err := core.New(rdb, core.WithLogger(nil), core.WithLocalFallback(0, 0), core.WithBreaker(0, 0), core.WithTimeout(5*time.Second))
	if err != nil {
		fail("%v", err)
	}
	defer func() { _ = l.Close() }()
	for _, name := range strings.Split(*algs, ",") {
		alg := map[string]core.Algorithm{"token": core.TokenBucket, "leaky": core.LeakyBucket}[name]
		if alg == 0 && name != "token" {
			fail("unknown algorithm %q", name)
		}
		for run := 1; run <= *runs; run++ {
			if *only == "" || *only == "slot" {
				for _, b := range strings.Split(*bursts, ",") {
					burst, err := strconv.Atoi(b)
					if err != nil || burst < 2 {
						fail("burst %q", b)
					}
					slotRun(ctx, rdb, l, alg, run, burst)
				}
			}
			if *only == "" || *only == "refund" {
				refundRun(ctx, rdb, l, alg, run)
			}
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "givebackprobe: "+format+"\n", args...)
	os.Exit(1)
}

// tags returns a fresh hash tag for the user and twin keys, and one in
// another Cluster slot for the global key.
func tags(ctx context.Context, rdb *redis.ClusterClient, what string) (user, global string) {
	base := fmt.Sprintf("gbp-%s-%d", what, time.Now().UnixNano())
	user = base + "-u"
	us := rdb.ClusterKeySlot(ctx, user).Val()
	for i := 0; ; i++ {
		global = fmt.Sprintf("%s-g%d", base, i)
		if rdb.ClusterKeySlot(ctx, global).Val() != us {
			return user, global
		}
	}
}

// peekLost is twin.Remaining - user.Remaining, read in one script call.
func peekLost(ctx context.Context, l *core.Limiter, user, twin core.Rule) (lost int, u, tw core.Result) {
	r, err := l.Peek(ctx, user, twin)
	if err != nil {
		fail("peek: %v", err)
	}
	return r.Rules[1].Remaining - r.Rules[0].Remaining, r.Rules[0], r.Rules[1]
}

func slotRun(ctx context.Context, rdb *redis.ClusterClient, l *core.Limiter, alg core.Algorithm, run, burst int) {
	ut, gt := tags(ctx, rdb, "slot")
	lim := core.Limit{Algorithm: alg, Rate: *rate, Period: time.Second, Burst: burst}
	user, twin := lim.For("{"+ut+"}user"), lim.For("{"+ut+"}twin")
	global := core.Limit{Rate: 1, Period: time.Hour}.For("{" + gt + "}global")
	if r, err := l.Allow(ctx, 1, global); err != nil || !r.Allowed {
		fail("exhausting the global key: %v %v", r, err)
	}
	// Pre-drain both to half, so that neither refills to full in a run.
	pre, err := l.Allow(ctx, burst/2, user, twin)
	if err != nil || !pre.Allowed {
		fail("pre-drain: %v %v", pre, err)
	}
	var left atomic.Int64
	left.Store(int64(*refusals))
	var slotRefused, userRefused, admitted, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				r, err := l.Allow(ctx, 1, user, global)
				switch {
				case err != nil:
					errs.Add(1)
				case r.Allowed:
					admitted.Add(1)
				case r.Rules[0].Allowed && !r.Rules[1].Allowed:
					slotRefused.Add(1)
				default:
					userRefused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	lost, u, tw := peekLost(ctx, l, user, twin)
	// The twin checked against the clock: it took burst/2 from full at
	// pre.At and nothing since, so it holds min(burst, burst/2 + refill).
	// (For the leaky bucket, the same in queue room.)
	refill := tw.At.Sub(pre.Rules[1].At) * time.Duration(*rate) / time.Second
	model := min(burst, burst-burst/2+int(refill))
	per := float64(lost) / float64(max(slotRefused.Load(), 1))
	note := ""
	if lost < 0 {
		note = "  ABOVE THE COUNTERFACTUAL"
	}
	fmt.Printf("slot   %-11s run %d: %d/s burst %d, %d goroutines: %d refused by the later slot (%d by the user key, %d admitted, %d errors) in %v (%.0f/s); user %d, twin %d (clock model %d): lost %d = %.3f per refusal%s\n",
		alg, run, *rate, burst, *workers, slotRefused.Load(), userRefused.Load(), admitted.Load(), errs.Load(),
		took.Round(time.Millisecond), float64(slotRefused.Load())/took.Seconds(), u.Remaining, tw.Remaining, model, lost, per, note)
}

func refundRun(ctx context.Context, rdb *redis.ClusterClient, l *core.Limiter, alg core.Algorithm, run int) {
	ut, _ := tags(ctx, rdb, "refund")
	lim := core.Limit{Algorithm: alg, Rate: *rrate, Period: time.Second}
	user, twin := lim.For("{"+ut+"}user"), lim.For("{"+ut+"}twin")
	// Half full at the start; the others drain faster than the refill, so
	// the bucket is near empty while the refunds land, and never full
	// (where both keys would stand at capacity and hide a loss).
	if r, err := l.Allow(ctx, *rrate/2, user, twin); err != nil || !r.Allowed {
		fail("pre-drain: %v %v", r, err)
	}
	done := make(chan struct{})
	var otherTakes, otherDenied, takeTries, errs atomic.Int64
	var owg, rwg sync.WaitGroup
	for range *others {
		owg.Add(1)
		go func() {
			defer owg.Done()
			tick := time.NewTicker(*every)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				r, err := l.Allow(ctx, 1, user, twin)
				switch {
				case err != nil:
					errs.Add(1)
				case r.Allowed:
					otherTakes.Add(1)
				default:
					otherDenied.Add(1)
				}
			}
		}()
	}
	var refunded atomic.Int64
	start := time.Now()
	for i := range *refunder {
		n := *refunds / *refunder
		if i < *refunds%*refunder {
			n++
		}
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for range n {
				var taken core.Result
				for {
					takeTries.Add(1)
					r, err := l.Allow(ctx, 1, user)
					if err != nil {
						errs.Add(1)
					} else if r.Allowed {
						taken = r
						break
					}
					time.Sleep(time.Millisecond) // a hungry client retrying, not synchronisation
				}
				time.Sleep(*delay) // the request's own work: the measured variable
				if err := l.Refund(ctx, taken); err != nil {
					errs.Add(1)
					continue
				}
				refunded.Add(1)
			}
		}()
	}
	rwg.Wait()
	lost, u, tw := peekLost(ctx, l, user, twin)
	close(done)
	owg.Wait()
	took := time.Since(start)
	note := ""
	if lost < 0 {
		note = "  ABOVE THE COUNTERFACTUAL"
	}
	fmt.Printf("refund %-11s run %d: %d/s, %d refunds %v after their takes (%d take tries), others took %d (denied %d), %d errors, in %v; user %d, twin %d: %d of %d came back (lost %d)%s\n",
		alg, run, *rrate, refunded.Load(), *delay, takeTries.Load(), otherTakes.Load(), otherDenied.Load(), errs.Load(),
		took.Round(time.Millisecond), u.Remaining, tw.Remaining, refunded.Load()-int64(lost), refunded.Load(), lost, note)
}
