package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisURL is REDIS_URL, or the local default.
func redisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// runPrefix is in every key this run writes; TestMain deletes them at the end.
var runPrefix = fmt.Sprintf("rlbench-%d-%d", os.Getpid(), time.Now().UnixNano())

var nsSeq atomic.Int64

// keySet returns n keys unique to this run and this call, and a SCAN
// pattern that matches every Redis key made from them, whatever the
// implementation adds around them.
func keySet(n int) (keys []string, pattern string) {
	ns := nsSeq.Add(1)
	keys = make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:s%d:k%d", runPrefix, ns, i)
	}
	return keys, fmt.Sprintf("*%s:s%d:k*", runPrefix, ns)
}

var (
	redisOnce sync.Once
	redisErr  error
)

// needRedis skips tb, loudly, when REDIS_URL cannot be reached.
func needRedis(tb testing.TB) {
	tb.Helper()
	redisOnce.Do(func() {
		opt, err := redis.ParseURL(redisURL())
		if err != nil {
			redisErr = err
		} else {
			rdb := redis.NewClient(opt)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			redisErr = rdb.Ping(ctx).Err()
			cancel()
			_ = rdb.Close()
		}
		if redisErr != nil {
			fmt.Fprintf(os.Stderr, "\n*** bench: SKIPPING every Redis benchmark: no Redis at REDIS_URL=%s (%v) ***\n\n", redisURL(), redisErr)
		}
	})
	if redisErr != nil && os.Getenv("CI") != "" {
		tb.Fatalf("no Redis at REDIS_URL=%s under CI: %v", redisURL(), redisErr)
	}
	if redisErr != nil {
		tb.Skipf("no Redis at REDIS_URL=%s: %v (set REDIS_URL to a real Redis)", redisURL(), redisErr)
	}
}

// counter is the go-redis hook of every bench client: it counts the
// commands sent to Redis and the round trips (a pipeline of any length is
// one), tells whether a command is in flight (see quiesce), and records
// the script calls made under a capturing context (see captureOne). The
// hook is the same on every client, so it costs every contender alike:
// two atomic adds and an atomic load per command.
type counter struct {
	started, finished atomic.Int64 // single commands
	piped, pipes      atomic.Int64 // commands in pipelines, and pipelines
	pipesDone         atomic.Int64
}

// cmds is how many commands the client has sent; trips, in how many round
// trips.
func (c *counter) cmds() int64  { return c.started.Load() + c.piped.Load() }
func (c *counter) trips() int64 { return c.started.Load() + c.pipes.Load() }

// busy is how many commands or pipelines are in flight.
func (c *counter) busy() int64 {
	return c.started.Load() - c.finished.Load() + c.pipes.Load() - c.pipesDone.Load()
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.started.Add(1)
		err := next(ctx, cmd)
		c.finished.Add(1)
		if capturing.Load() > 0 {
			record(ctx, cmd, err)
		}
		return err
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.piped.Add(int64(len(cmds)))
		c.pipes.Add(1)
		err := next(ctx, cmds)
		c.pipesDone.Add(1)
		if capturing.Load() > 0 {
			for _, cmd := range cmds {
				record(ctx, cmd, cmd.Err())
			}
		}
		return err
	}
}

// Quiet periods (see quiesce).
const (
	quietFor = 50 * time.Millisecond
	quietMax = 5 * time.Second
)

// quiesce waits until the client has had no command in flight and has
// started none for quietFor, for at most quietMax, and reports whether it
// got there. Called once a cell's deciders have all returned, it waits out
// the background work a Limiter starts on its own (the health check's
// INFOs, FUNCTION LOAD: at New, and again on every connection the pool
// opens while priming), so that none of it lands in the measured window.
// It waits the same way for every contender.
func (c *counter) quiesce() bool {
	deadline := time.Now().Add(quietMax)
	last, since := c.cmds(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
		if n := c.cmds(); n != last || c.busy() != 0 {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= quietFor {
			return true
		}
	}
	return false
}

type client struct {
	rdb *redis.Client
	ctr *counter
}

var (
	clientsMu sync.Mutex
	clients   = map[string]client{}
)

// clientOptions are the options of every contender's client: the same for
// all (TestClientOptions checks it). ContextTimeoutEnabled is set, and the
// pool is big enough for 256 goroutines that each hold a connection.
func clientOptions() (*redis.Options, error) {
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL=%q: %w", redisURL(), err)
	}
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 320
	opt.PoolTimeout = 5 * time.Second
	countWrites(opt)
	return opt, nil
}

// clientNamed returns the client of one implementation (one per name, kept
// for the whole run, so pools and counters are not shared between peers),
// made with clientOptions and the counter hook.
func clientNamed(name string) (client, error) {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if c, ok := clients[name]; ok {
		return c, nil
	}
	opt, err := clientOptions()
	if err != nil {
		return client{}, err
	}
	c := client{rdb: redis.NewClient(opt), ctr: &counter{}}
	c.rdb.AddHook(c.ctr)
	clients[name] = c
	return c, nil
}

// clientFor is clientNamed, failing tb on an error.
func clientFor(tb testing.TB, name string) client {
	tb.Helper()
	c, err := clientNamed(name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// cleanup closes the clients and deletes every key of this run.
func cleanup() error {
	clientsMu.Lock()
	for name, c := range clients {
		_ = c.rdb.Close()
		delete(clients, name)
	}
	clientsMu.Unlock()
	closeInfoClient()
	if redisErr != nil {
		return nil
	}
	err := errors.Join(unlinkMatching("*"+runPrefix+"*"), dropBenchFunctions())
	if adminRDB != nil {
		_ = adminRDB.Close()
	}
	return err
}

var (
	adminOnce sync.Once
	adminRDB  *redis.Client
	adminErr  error
)

// adminClient is a client of its own for deleting keys and loading
// things, so that no contender's counters see its commands. It counts what
// it writes, like every client of the process.
func adminClient() (*redis.Client, error) {
	adminOnce.Do(func() {
		opt, err := redis.ParseURL(redisURL())
		if err != nil {
			adminErr = err
			return
		}
		opt.PoolSize = 4
		countWrites(opt)
		adminRDB = redis.NewClient(opt)
	})
	return adminRDB, adminErr
}

// unlinkMatching deletes the keys that match pattern (SCAN, then UNLINK),
// with the admin client.
func unlinkMatching(pattern string) error {
	rdb, err := adminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// unlinkKeys deletes exactly keys, with the admin client.
func unlinkKeys(keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	rdb, err := adminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rdb.Unlink(ctx, keys...).Err()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if err := cleanup(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: cleaning up keys %s*: %v\n", runPrefix, err)
	}
	os.Exit(code)
}

// hist is a log-linear latency histogram in nanoseconds: 32 buckets per
// power of two, so a percentile is exact to about 3%. Recording is one
// index computation and one increment, with no allocation.
type hist [histBuckets]uint64

const (
	subBits     = 5
	histBuckets = (64 - subBits + 1) << subBits
)

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1
	return (e+1)<<subBits | int(v>>e)&(1<<subBits-1)
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) float64 {
	if i < 1<<subBits {
		return float64(i)
	}
	e := i>>subBits - 1
	lo := uint64(1<<subBits|i&(1<<subBits-1)) << e
	return float64(lo) + float64(uint64(1)<<e)/2
}

func (h *hist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h[bucketOf(uint64(d))]++
}

func (h *hist) add(o *hist) {
	for i, n := range o {
		h[i] += n
	}
}

// quantile returns the q-quantile (0 < q <= 1).
func (h *hist) quantile(q float64) time.Duration {
	var total uint64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range h {
		seen += n
		if seen >= rank {
			return time.Duration(bucketValue(i))
		}
	}
	return 0
}

// decider makes one decision for keys[i] of its scenario.
type decider func(ctx context.Context, i int) (allowed bool, err error)

// stats is what one measured run did.
type stats struct {
	ops, denied, errs int64
	firstErr          error
	elapsed           time.Duration
	mallocs, bytes    uint64
	cmds, trips       int64
	lat               hist
	// redis is what the Redis server did over the measured window (see
	// redisWindow); redisErr is why it is unknown.
	redis    redisDelta
	redisErr error
}

func (s *stats) opsPerSec() float64 { return float64(s.ops) / s.elapsed.Seconds() }
func (s *stats) allocsPerOp() float64 {
	return float64(s.mallocs) / float64(max(s.ops, 1))
}
func (s *stats) callsPer1k() float64 { return 1000 * float64(s.cmds) / float64(max(s.ops, 1)) }
func (s *stats) tripsPer1k() float64 { return 1000 * float64(s.trips) / float64(max(s.ops, 1)) }
func (s *stats) deniedPct() float64  { return 100 * float64(s.denied) / float64(max(s.ops, 1)) }
func (s *stats) p(q float64) float64 { return float64(s.lat.quantile(q)) / 1e3 } // µs

// redisCPUPerOp is the Redis server's CPU (user + sys) per decision over
// the measured window, in µs; NaN when it could not be read.
func (s *stats) redisCPUPerOp() float64 {
	if s.redisErr != nil || s.ops == 0 {
		return math.NaN()
	}
	return s.redis.cpu.Seconds() * 1e6 / float64(s.ops)
}

// scriptPerOp is the time Redis spent executing script calls (FCALL,
// EVALSHA, EVAL: INFO commandstats' usec, which includes the commands a
// script runs) per decision over the measured window, in µs; NaN when it
// could not be read.
func (s *stats) scriptPerOp() float64 {
	if s.redisErr != nil || s.ops == 0 {
		return math.NaN()
	}
	return float64(s.redis.scripts.usec) / float64(s.ops)
}

// cpuNote marks a Redis CPU reading that other clients' commands disturbed
// (see redisDelta.disturbed): it includes their work too.
func (s *stats) cpuNote() string {
	if s.redisErr == nil && s.redis.disturbed(0) {
		return "*"
	}
	return ""
}

// scriptNote marks a commandstats reading that includes other clients'
// script calls: Redis ran more of them in the window than this client
// sent commands, or other clients' bytes disturbed the window.
func (s *stats) scriptNote() string {
	if s.redisErr == nil && (s.redis.scripts.calls > s.cmds || s.redis.disturbed(0)) {
		return "*"
	}
	return ""
}

// form is the script command the window's decisions reached Redis with:
// "FCALL", "EVALSHA", "EVAL", several of them joined by "+", or "none".
func (s *stats) form() string {
	if s.redisErr != nil {
		return "?"
	}
	return s.redis.scripts.form()
}

// worker is one goroutine's tallies, padded so neighbours do not share a
// cache line.
type worker struct {
	lat          hist
	denied, errs int64
	firstErr     error
	_            [64]byte
}

var (
	workersMu sync.Mutex
	workers   []*worker // reused between runs: 15 KiB each
)

func getWorkers(n int) []*worker {
	workersMu.Lock()
	defer workersMu.Unlock()
	for len(workers) < n {
		workers = append(workers, new(worker))
	}
	ws := workers[:n]
	for _, w := range ws {
		*w = worker{}
	}
	return ws
}

// run makes decisions with g goroutines over nkeys keys (key i%nkeys for
// the i-th decision) until maxOps are done (0: no bound) or maxDur has
// passed (0: no bound). Goroutines are started and waiting before start is
// called (b.ResetTimer), and stop (b.StopTimer) is called as soon as the last
// one ends, so only decisions are measured. Latency is recorded per decision
// into per-goroutine histograms; allocations are counted by the runtime over
// the measured window.
func run(g int, maxOps int64, maxDur time.Duration, nkeys int, d decider, ctr *counter, start, stop func()) stats {
	if maxOps <= 0 {
		maxOps = math.MaxInt64
	}
	ws := getWorkers(g)
	var (
		next    atomic.Int64
		halt    atomic.Bool
		wg      sync.WaitGroup
		startCh = make(chan struct{})
		ctx     = context.Background()
	)
	wg.Add(g)
	for _, w := range ws {
		go func(w *worker) {
			defer wg.Done()
			<-startCh
			for !halt.Load() {
				i := next.Add(1) - 1
				if i >= maxOps {
					return
				}
				t0 := time.Now()
				ok, err := d(ctx, int(i%int64(nkeys)))
				w.lat.record(time.Since(t0))
				if err != nil {
					if w.errs == 0 {
						w.firstErr = err
					}
					w.errs++
				} else if !ok {
					w.denied++
				}
			}
		}(w)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The Redis readings bracket the window: the goroutines are parked on
	// startCh until after the first, and have all returned before the
	// second, so Redis did no work of ours in between but the measured
	// decisions and the readings' own INFO.
	win := redisWindow()
	cmds0, trips0 := ctr.cmds(), ctr.trips()
	if start != nil {
		start()
	}
	// The time bound starts with the window (not before the GC and the
	// readings above, which on a loaded machine can take longer than a
	// short window).
	var timer *time.Timer
	if maxDur > 0 {
		timer = time.AfterFunc(maxDur, func() { halt.Store(true) })
	}
	t0 := time.Now()
	close(startCh)
	wg.Wait()
	elapsed := time.Since(t0)
	if stop != nil {
		stop()
	}
	cmds, trips := ctr.cmds()-cmds0, ctr.trips()-trips0
	rd, rerr := win()
	runtime.ReadMemStats(&after)
	if timer != nil {
		timer.Stop()
	}
	s := stats{
		elapsed:  elapsed,
		mallocs:  after.Mallocs - before.Mallocs,
		bytes:    after.TotalAlloc - before.TotalAlloc,
		cmds:     cmds,
		trips:    trips,
		redis:    rd,
		redisErr: rerr,
	}
	// A goroutine stopped by halt may have taken an index it never used:
	// count the decisions recorded.
	var done int64
	for _, w := range ws {
		s.lat.add(&w.lat)
		s.denied += w.denied
		s.errs += w.errs
		if s.firstErr == nil {
			s.firstErr = w.firstErr
		}
	}
	for _, n := range s.lat {
		done += int64(n)
	}
	s.ops = done
	return s
}

// prime makes passes decisions for each key (at least 4 per goroutine),
// unmeasured, with g goroutines but at least 64 and at most 256: it opens
// connections and loads the script; for denied traffic (two passes) it
// spends every key's quota, then has every key denied once, so that caches
// of denials start the measurement warm.
func prime(g, nkeys, passes int, d decider) {
	var next atomic.Int64
	var wg sync.WaitGroup
	n := int64(max(passes*nkeys, 4*g))
	for range min(max(g, 64), 256) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				_, _ = d(context.Background(), int(i%int64(nkeys)))
			}
		}()
	}
	wg.Wait()
}

// report adds the custom metrics of s to b.
func report(b *testing.B, s *stats) {
	b.ReportMetric(s.opsPerSec(), "ops/s")
	if s.redisErr == nil {
		b.ReportMetric(s.redisCPUPerOp(), "redis-cpu-µs/op")
		b.ReportMetric(s.scriptPerOp(), "script-µs/op")
		if s.redis.disturbed(0) {
			b.ReportMetric(float64(s.redis.foreign(0)), "redis-foreign-B")
		}
	} else {
		b.Logf("no Redis CPU reading: %v", s.redisErr)
	}
	b.ReportMetric(s.p(0.50), "p50-µs")
	b.ReportMetric(s.p(0.99), "p99-µs")
	b.ReportMetric(s.callsPer1k(), "rediscalls/1kop")
	b.ReportMetric(s.tripsPer1k(), "roundtrips/1kop")
	b.ReportMetric(s.deniedPct(), "denied-%")
	if s.errs > 0 {
		b.ReportMetric(float64(s.errs), "errors")
		b.Logf("%d of %d decisions failed; first: %v", s.errs, s.ops, s.firstErr)
	}
}

func TestHistQuantile(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(tt.q)
		if diff := math.Abs(float64(got-tt.want)) / float64(tt.want); diff > 0.04 {
			t.Errorf("quantile(%v) = %v, want %v within 4%%", tt.q, got, tt.want)
		}
	}
	for _, v := range []uint64{0, 1, 31, 32, 33, 1000, 1 << 40, math.MaxUint64} {
		if i := bucketOf(v); i < 0 || i >= histBuckets {
			t.Errorf("bucketOf(%d) = %d, out of [0, %d)", v, i, histBuckets)
		}
	}
	var idx []int
	for v := uint64(1); v < 1<<30; v = v*5/4 + 1 {
		idx = append(idx, bucketOf(v))
	}
	if !sort.IntsAreSorted(idx) {
		t.Errorf("bucketOf is not monotonic: %v", idx)
	}
}
