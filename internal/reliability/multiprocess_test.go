package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// workerEnv carries a workerSpec to the test binary run as a worker.
const workerEnv = "REDLIMIT_RELIABILITY_WORKER"

type workerSpec struct {
	URL        string
	Key        string
	Limit      core.Limit
	Start      time.Time // all workers begin at once
	Duration   time.Duration
	Goroutines int
	Leases     float64 // core.WithLeases, if > 0
}

type workerResult struct {
	Admitted, Denied, Failed int64
	FirstErr                 string
	First                    time.Time // first call sent
	LastSent                 time.Time // last call sent
	Last                     time.Time // last reply received
}

const resultPrefix = "WORKER RESULT "

// TestHelperProcess is not a test: it is the body of a worker process, run
// by TestMultiProcessOneKey as this test binary with workerEnv set (the
// os/exec helper-process pattern). Without workerEnv it does nothing.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		return
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "worker: bad spec: %v\n", err)
		os.Exit(2)
	}
	res, err := runWorker(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(2)
	}
	b, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", resultPrefix, b)
	os.Exit(0)
}

// runWorker hammers spec.Key from spec.Goroutines goroutines, with a
// client and a Limiter of its own, from spec.Start for spec.Duration.
func runWorker(spec workerSpec) (workerResult, error) {
	opt, err := redis.ParseURL(spec.URL)
	if err != nil {
		return workerResult{}, err
	}
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = spec.Goroutines
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }() // the process exits next; the counts are all it reports
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return workerResult{}, err
	}
	// A generous timeout: this test is about exactness, and a call that
	// times out may still have been counted by Redis.
	opts := []core.Option{core.WithTimeout(2 * patient), core.WithLogger(nil)}
	if spec.Leases > 0 {
		opts = append(opts, core.WithLeases(spec.Leases))
	}
	lim, err := core.New(rdb, opts...)
	if err != nil {
		return workerResult{}, err
	}
	end := spec.Start.Add(spec.Duration)
	time.Sleep(time.Until(spec.Start)) // the start line shared by all processes

	var mu sync.Mutex
	var total workerResult
	var wg sync.WaitGroup
	for range spec.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r workerResult
			for {
				sent := time.Now()
				if !sent.Before(end) {
					break
				}
				res, err := lim.Allow(context.Background(), 1, spec.Limit.For(spec.Key))
				got := time.Now()
				if r.First.IsZero() {
					r.First = sent
				}
				r.LastSent, r.Last = sent, got
				switch {
				case err != nil:
					r.Failed++
					if r.FirstErr == "" {
						r.FirstErr = err.Error()
					}
				case res.Allowed:
					r.Admitted++
				default:
					r.Denied++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			total.Admitted += r.Admitted
			total.Denied += r.Denied
			total.Failed += r.Failed
			if total.FirstErr == "" {
				total.FirstErr = r.FirstErr
			}
			if !r.First.IsZero() && (total.First.IsZero() || r.First.Before(total.First)) {
				total.First = r.First
			}
			if r.Last.After(total.Last) {
				total.Last = r.Last
			}
			if r.LastSent.After(total.LastSent) {
				total.LastSent = r.LastSent
			}
		}()
	}
	wg.Wait()
	return total, nil
}

// TestMultiProcessOneKey: 4 OS processes, each with its own clients and 16
// goroutines, share one key on real Redis for about 2 s. Together they
// never get more than the algorithm's bound, and get at least 95% of it
// (90% with leases, whose units may be held unused by another process).
func TestMultiProcessOneKey(t *testing.T) {
	rdb := redistest.Real(t)
	url := os.Getenv("REDIS_URL")
	const processes, goroutines = 4, 16
	const run = 2 * time.Second
	for _, tc := range []struct {
		name  string
		limit core.Limit
		// bound is the most the limit admits between the first call sent
		// and the last reply received, t apart.
		bound func(l core.Limit, t time.Duration) int64
		// oneWindow: the bound holds only if the run fits in one Period.
		oneWindow bool
		leases    float64
		// aligned: the run must fit in one epoch-aligned window.
		aligned bool
	}{
		{
			// All calls fall inside one window (Period > run + timeouts), so
			// the bound is Rate.
			name:      "sliding window",
			limit:     core.Limit{Algorithm: core.SlidingWindow, Rate: 1500, Period: 5 * time.Second},
			bound:     func(l core.Limit, t time.Duration) int64 { return int64(l.Rate) },
			oneWindow: true,
		},
		{
			// Each process spends leases of up to 1/16 of the window locally:
			// the window's Rate still bounds them all together.
			name:      "fixed window with leases",
			limit:     core.Limit{Algorithm: core.FixedWindow, Rate: 100_000, Period: time.Minute},
			bound:     func(l core.Limit, t time.Duration) int64 { return int64(l.Rate) },
			oneWindow: true,
			leases:    1.0 / 16,
			aligned:   true,
		},
		{
			// The same with a quota the processes may not spend in the run:
			// whatever they ask for within it is admitted.
			name:      "fixed window with leases, mostly admitted",
			limit:     core.Limit{Algorithm: core.FixedWindow, Rate: 2_000_000, Period: time.Minute},
			bound:     func(l core.Limit, t time.Duration) int64 { return int64(l.Rate) },
			oneWindow: true,
			leases:    1.0 / 16,
			aligned:   true,
		},
		{
			name:  "token bucket",
			limit: core.Limit{Algorithm: core.TokenBucket, Rate: 1000, Period: time.Second, Burst: 200},
			bound: func(l core.Limit, t time.Duration) int64 {
				return int64(l.Burst) + int64(float64(l.Rate)*t.Seconds()/l.Period.Seconds())
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := unique(t)
			t.Cleanup(func() {
				rdb.Del(context.Background(), "ratelimit:{"+key+"}"+swKey, "ratelimit:{"+key+"}"+swmKey, "ratelimit:{"+key+"}"+tbKey, "ratelimit:{"+key+"}"+fwKey)
			})
			spec := workerSpec{URL: url, Key: key, Limit: tc.limit, Duration: run, Goroutines: goroutines,
				// Time for the processes to start (they are -race binaries).
				Start: time.Now().Add(2 * time.Second), Leases: tc.leases}
			if p := tc.limit.Period; tc.aligned && spec.Start.Truncate(p) != spec.Start.Add(run+time.Second).Truncate(p) {
				// Windows are aligned to the epoch: start in the next one.
				spec.Start = spec.Start.Add(run + time.Second).Truncate(p).Add(100 * time.Millisecond)
			}
			raw, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			type outcome struct {
				res workerResult
				err error
			}
			outs := make([]outcome, processes)
			var wg sync.WaitGroup
			for i := range processes {
				cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
				cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Start(); err != nil {
					t.Fatalf("starting worker %d: %v", i, err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := cmd.Wait()
					if err != nil {
						outs[i].err = fmt.Errorf("worker %d (pid %d): %v; stderr: %s", i, cmd.Process.Pid, err, stderr.String())
						return
					}
					outs[i].err = fmt.Errorf("worker %d printed no result; stdout: %s", i, stdout.String())
					sc := bufio.NewScanner(&stdout)
					for sc.Scan() {
						if line, ok := strings.CutPrefix(sc.Text(), resultPrefix); ok {
							outs[i].err = json.Unmarshal([]byte(line), &outs[i].res)
						}
					}
				}()
			}
			wg.Wait()

			var sum workerResult
			for i, o := range outs {
				if o.err != nil {
					t.Fatal(o.err)
				}
				r := o.res
				if late := r.First.Sub(spec.Start); late > time.Second {
					t.Errorf("worker %d began %v after the start line: the processes did not run together", i, late)
				}
				if r.Failed > 0 {
					t.Errorf("worker %d: %d calls failed, first: %s", i, r.Failed, r.FirstErr)
				}
				sum.Admitted += r.Admitted
				sum.Denied += r.Denied
				sum.Failed += r.Failed
				if sum.First.IsZero() || r.First.Before(sum.First) {
					sum.First = r.First
				}
				if r.Last.After(sum.Last) {
					sum.Last = r.Last
				}
				if r.LastSent.After(sum.LastSent) {
					sum.LastSent = r.LastSent
				}
				t.Logf("worker %d: %d admitted, %d denied, %d failed", i, r.Admitted, r.Denied, r.Failed)
			}
			// Redis decided every call between the first one sent and the
			// last reply: the upper bound is over that span. Callers asked
			// for more than the limit from the first call sent to the last:
			// the limit is reached, less 5%, over that span.
			span, asking := sum.Last.Sub(sum.First), sum.LastSent.Sub(sum.First)
			if tc.oneWindow && span >= tc.limit.Period {
				t.Fatalf("the run took %v, longer than one window (%v): the bound Rate does not apply", span, tc.limit.Period)
			}
			bound, reach := tc.bound(tc.limit, span), tc.bound(tc.limit, asking)
			calls := sum.Admitted + sum.Denied + sum.Failed
			// Callers that asked for less than the bound (a large quota, a
			// -race build) must get all they asked for, less the margin.
			reach = min(reach, calls)
			t.Logf("%d processes x %d goroutines, %v: %d calls (%.0f/s), %d admitted, bound %d (%.1f%%; %d over the %v of asking)",
				processes, goroutines, span.Round(time.Millisecond), calls, float64(calls)/span.Seconds(),
				sum.Admitted, bound, 100*float64(sum.Admitted)/float64(bound), reach, asking.Round(time.Millisecond))
			if sum.Admitted > bound {
				t.Errorf("%d admitted over %v, want <= %d", sum.Admitted, span, bound)
			}
			least := 0.95
			if tc.leases > 0 {
				least = 0.90
			}
			if float64(sum.Admitted) < least*float64(reach) {
				t.Errorf("%d admitted, want >= %.0f%% of %d (the bound over the %v callers kept asking)", sum.Admitted, 100*least, reach, asking)
			}
		})
	}
}
