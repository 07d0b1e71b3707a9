package bench

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
)

// httpLimit is far above the load, so the middleware's cost is measured on
// admitted requests (every request comes from 127.0.0.1: one key, a hot
// key).
var httpLimit = core.PerSecond(10_000_000)

// httpConns is how many keep-alive connections the load generator holds.
const httpConns = 64

var hello = []byte("hello, world\n")

func helloHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(hello) }

// httpApp is one framework's hello-world server, bare (p nil) or behind our
// middleware serving p. start serves it on 127.0.0.1 and returns its URL
// and a stop function.
type httpApp struct {
	name, benchName string // in the table; in benchmark names (app=<it>)
	start           func(tb testing.TB, p *httplimit.Policy) (url string, stop func())
}

func httptestStart(h http.Handler) (string, func()) {
	srv := httptest.NewServer(h) // listens on 127.0.0.1 only
	return srv.URL + "/hello", srv.Close
}

var httpApps = []httpApp{
	{"net/http", "nethttp", func(tb testing.TB, p *httplimit.Policy) (string, func()) {
		var h http.Handler = http.HandlerFunc(helloHandler)
		if p != nil {
			h = nethttplimit.New(p)(h)
		}
		return httptestStart(h)
	}},
}

// httpMode is how an app is served: bare, or behind our middleware with a
// Limiter of its own (options opts, go-redis client named client) deciding
// limit.
type httpMode struct {
	name   string // in benchmark names
	label  string // in the table
	client string
	limit  core.Limit
	opts   []core.Option
}

func (m httpMode) bare() bool { return m.client == "" }

var (
	httpBare    = httpMode{name: "bare", label: "bare"}
	httpBatched = httpMode{name: "limited", label: "limited (batched, the default)", client: "http-batched", limit: httpLimit}
	httpPlain   = httpMode{name: "limited-plain", label: "limited, plain (`WithBatching(1)`)", client: "http-plain", limit: httpLimit,
		opts: []core.Option{core.WithBatching(1)}}
	// httpModes are the modes of every app.
	httpModes = []httpMode{httpBare, httpBatched, httpPlain}
	// httpExtraModes are further modes of net/http only (see leases).
	httpExtraModes []httpMode
)

// modesOf is the modes app is measured in.
func modesOf(app httpApp) []httpMode {
	if app.name == "net/http" {
		return append(append([]httpMode{}, httpModes...), httpExtraModes...)
	}
	return httpModes
}

// httpPolicy returns the Policy of mode (nil for bare), the client its
// Limiter uses (for its counters), and a function that closes the Limiter
// and deletes the keys it wrote. Its keys carry a prefix unique to the
// call.
func httpPolicy(tb testing.TB, mode httpMode) (*httplimit.Policy, client, func()) {
	tb.Helper()
	if mode.bare() {
		return nil, client{ctr: &counter{}}, func() {}
	}
	c := clientFor(tb, mode.client)
	prefix := fmt.Sprintf("%s:h%d", runPrefix, nsSeq.Add(1))
	l, err := newLimiter(c.rdb, append([]core.Option{core.WithPrefix(prefix)}, mode.opts...)...)
	if err != nil {
		tb.Fatalf("%s: %v", mode.name, err)
	}
	p, err := httplimit.New(httplimit.Config{Limiter: l, Limit: mode.limit})
	if err != nil {
		tb.Fatalf("%s: %v", mode.name, err)
	}
	return p, c, func() {
		_ = l.Close()
		if err := unlinkMatching(prefix + ":*"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: deleting %s:*: %v\n", prefix, err)
		}
	}
}

// httpLoad sends GETs to url over conns keep-alive connections until
// maxReq are done (0: no bound) or maxDur has passed (0: no bound). It
// returns the requests completed, how many were not 200, and the time.
func httpLoad(url string, conns int, maxReq int64, maxDur time.Duration) (done, non200 int64, elapsed time.Duration) {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if maxReq <= 0 {
		maxReq = 1 << 62
	}
	var (
		next, bad, ok atomic.Int64
		halt          atomic.Bool
		wg            sync.WaitGroup
	)
	if maxDur > 0 {
		defer time.AfterFunc(maxDur, func() { halt.Store(true) }).Stop()
	}
	t0 := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !halt.Load() && next.Add(1) <= maxReq {
				resp, err := client.Get(url)
				if err != nil {
					bad.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load() + bad.Load(), bad.Load(), time.Since(t0)
}

// httpRun is one measured load of an app in a mode.
type httpRun struct {
	done, bad int64
	elapsed   time.Duration
	cmds      int64
	redis     redisDelta
	redisErr  error
}

// httpMeasure serves app in mode, opens the connections, waits until the
// Limiter's client is quiet (see quiesce), then loads it for maxReq
// requests or maxDur, with the Redis readings bracketing the load.
// start and stop, if set, are called right around the load (b.ResetTimer,
// b.StopTimer).
func httpMeasure(tb testing.TB, app httpApp, mode httpMode, maxReq int64, maxDur time.Duration, start, stop func()) httpRun {
	tb.Helper()
	p, c, clean := httpPolicy(tb, mode)
	defer clean()
	url, halt := app.start(tb, p)
	defer halt()
	httpLoad(url, httpConns, 4*httpConns, 0) // open the connections
	if !c.ctr.quiesce() {
		tb.Logf("%s %s: the client did not go quiet for %v within %v: background work may be in the window", app.name, mode.name, quietFor, quietMax)
	}
	win := redisWindow()
	cmds0 := c.ctr.cmds()
	if start != nil {
		start()
	}
	var r httpRun
	r.done, r.bad, r.elapsed = httpLoad(url, httpConns, maxReq, maxDur)
	if stop != nil {
		stop()
	}
	r.cmds = c.ctr.cmds() - cmds0
	r.redis, r.redisErr = win()
	return r
}

// BenchmarkHTTP is requests per second of a hello-world app, bare and
// behind our middleware, over 64 keep-alive connections on loopback:
// BenchmarkHTTP/app=<nethttp|gin|echo|fiber>/mode=<bare|limited|...>.
func BenchmarkHTTP(b *testing.B) {
	needRedis(b)
	for _, app := range httpApps {
		for _, mode := range modesOf(app) {
			b.Run("app="+app.benchName+"/mode="+mode.name, func(b *testing.B) {
				b.ReportAllocs()
				r := httpMeasure(b, app, mode, int64(b.N), 0, b.ResetTimer, b.StopTimer)
				b.ReportMetric(float64(r.done)/r.elapsed.Seconds(), "req/s")
				if r.redisErr == nil && r.done > 0 {
					b.ReportMetric(r.redis.cpu.Seconds()*1e6/float64(r.done), "redis-cpu-µs/op")
				}
				if r.bad > 0 {
					b.ReportMetric(float64(r.bad), "non200")
				}
			})
		}
	}
}
