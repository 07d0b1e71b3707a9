package prommetrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/prommetrics"
)

// exampleRedis starts a miniredis whose clock stands still, so that no
// token comes back during an example, and returns a client of it and a
// stop that closes both. In production, rdb is a client for a real Redis.
func exampleRedis() (rdb *redis.Client, stop func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	mr.SetTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rdb = redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() {
		_ = rdb.Close() // the server goes next: nothing to report
		mr.Close()
	}
}

// A Policy of 10 requests a minute per client, observed by a Collector.
// One client sends 11: the 8th, 9th and 10th leave 2, 1 and 0 units, a
// fifth of the capacity or less, and count as near the limit; the 11th is
// denied. The scrape shows it as /metrics would (promhttp.HandlerFor(reg,
// promhttp.HandlerOpts{}) serves it).
func Example_nearLimit() {
	rdb, stop := exampleRedis()
	defer stop()
	limiter, err := core.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	collector := prommetrics.New(prommetrics.WithLimiter(limiter))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)
	policy, err := httplimit.New(httplimit.Config{
		Name: "api", Limiter: limiter, Limit: core.PerMinute(10), Observers: []httplimit.Observer{collector},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 11 {
		handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		switch f.GetName() {
		case "redlimit_decisions_total", "redlimit_near_limit_total":
			if _, err := expfmt.MetricFamilyToText(os.Stdout, f); err != nil {
				fmt.Println(err)
			}
		}
	}
	// Output:
	// # HELP redlimit_decisions_total Rate-limit decisions, by policy, algorithm, outcome (allowed, denied, failed_open, failed_closed, canceled, no_key, in_flight) and, for denied and in_flight, the limit that refused (refused_by: 0 the Limit, 1.. the Layers, a Scope's name, inflight).
	// # TYPE redlimit_decisions_total counter
	// redlimit_decisions_total{algorithm="token_bucket",outcome="allowed",policy="api",refused_by=""} 10
	// redlimit_decisions_total{algorithm="token_bucket",outcome="denied",policy="api",refused_by="0"} 1
	// # HELP redlimit_near_limit_total Allowed requests that left at most a fifth of their limit's capacity, by policy and algorithm.
	// # TYPE redlimit_near_limit_total counter
	// redlimit_near_limit_total{algorithm="token_bucket",policy="api"} 3
}
