package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttplimit"
)

// httpLimit is far above the load, so the middleware's cost is measured on
// admitted requests (every request comes from 127.0.0.1: one key).
var httpLimit = core.PerSecond(10_000_000)

// httpConns is how many keep-alive connections the load generator holds.
const httpConns = 64

var hello = []byte("hello, world\n")

func helloHandler(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(hello) }

// httpApp is one framework's hello-world server, bare or behind our
// middleware. start serves it on 127.0.0.1 and returns its URL and a stop
// function.
type httpApp struct {
	name  string
	start func(tb testing.TB, l *core.Limiter) (url string, stop func())
}

func httptestStart(h http.Handler) (string, func()) {
	srv := httptest.NewServer(h) // listens on 127.0.0.1 only
	return srv.URL + "/hello", srv.Close
}

var httpApps = []httpApp{
	{"net/http", func(tb testing.TB, l *core.Limiter) (string, func()) {
		var h http.Handler = http.HandlerFunc(helloHandler)
		if l != nil {
			h = nethttplimit.New(l, httpLimit)(h)
		}
		return httptestStart(h)
	}},
}

// httpLimiter returns the Limiter the middlewares use (nil for bare).
func httpLimiter(tb testing.TB, mode string) *core.Limiter {
	switch mode {
	case "bare":
		return nil
	case "limited":
		return core.New(clientFor(tb, "http-plain").rdb, core.WithTimeout(benchTimeout))
	case "limited+autopipeline":
		return core.New(clientFor(tb, "http-ap").rdb, core.WithTimeout(benchTimeout), core.WithAutoPipeline())
	}
	panic(mode)
}

var httpModes = []string{"bare", "limited", "limited+autopipeline"}

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

// BenchmarkHTTP is requests per second of a hello-world app, bare and
// behind our middleware, over 64 keep-alive connections on loopback.
func BenchmarkHTTP(b *testing.B) {
	needRedis(b)
	for _, app := range httpApps {
		for _, mode := range httpModes {
			b.Run(app.name+"/"+mode, func(b *testing.B) {
				url, stop := app.start(b, httpLimiter(b, mode))
				defer stop()
				httpLoad(url, httpConns, 4*httpConns, 0) // open the connections
				b.ReportAllocs()
				b.ResetTimer()
				done, bad, elapsed := httpLoad(url, httpConns, int64(b.N), 0)
				b.StopTimer()
				b.ReportMetric(float64(done)/elapsed.Seconds(), "req/s")
				if bad > 0 {
					b.ReportMetric(float64(bad), "non200")
				}
			})
		}
	}
}
