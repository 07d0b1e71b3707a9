package otelmetrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/nethttplimit"
	"github.com/redlimit/redlimit/otelmetrics"
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

// A Policy of 10 requests a minute per client, observed by an Observer.
// One client sends 11: the 8th, 9th and 10th leave 2, 1 and 0 units, a
// fifth of the capacity or less, and count as near the limit; the 11th is
// denied. In production the MeterProvider's reader is an exporter's (OTLP,
// Prometheus), and the meter otel.Meter("github.com/redlimit/redlimit").
func Example_nearLimit() {
	rdb, stop := exampleRedis()
	defer stop()
	limiter, err := core.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	observer, err := otelmetrics.New(mp.Meter("github.com/redlimit/redlimit"), otelmetrics.WithLimiter(limiter))
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, err := httplimit.New(httplimit.Config{
		Name: "api", Limiter: limiter, Limit: core.PerMinute(10), Observers: []httplimit.Observer{observer},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 11 {
		handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		fmt.Println(err)
		return
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || m.Name != "redlimit.decisions" && m.Name != "redlimit.near_limit" {
			continue
		}
		for _, p := range sum.DataPoints {
			attrs := p.Attributes.Encoded(attribute.DefaultEncoder()) // sorted by key
			lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, attrs, p.Value))
		}
	}
	slices.Sort(lines) // the SDK keeps the points of an instrument in no order
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// redlimit.decisions{algorithm=token_bucket,outcome=allowed,policy=api} 10
	// redlimit.decisions{algorithm=token_bucket,outcome=denied,policy=api,refused_by=0} 1
	// redlimit.near_limit{algorithm=token_bucket,policy=api} 3
}

// A Policy of 10 requests a minute per client, with an hourly layer of 2,
// whose decisions are spans of the requests' traces. The third request is
// refused by layer 1, the hourly one: its span says so, and the key is not
// among its attributes (WithKeyAttribute would add it). In production the
// TracerProvider is the application's (otel.GetTracerProvider()), with an
// exporter (OTLP), and a tracing middleware such as otelhttp makes the
// requests' spans, the parents of these.
func Example_tracing() {
	rdb, stop := exampleRedis()
	defer stop()
	limiter, err := core.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	observer, err := otelmetrics.New(noop.NewMeterProvider().Meter("github.com/redlimit/redlimit"),
		otelmetrics.WithTracerProvider(tp))
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, err := httplimit.New(httplimit.Config{
		Name: "api", Limiter: limiter, Limit: core.PerMinute(10), Observers: []httplimit.Observer{observer},
		Layers: []core.Limit{{Algorithm: core.FixedWindow, Rate: 2, Period: time.Hour}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	for range 3 {
		handler.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}

	refused := spans.GetSpans()[2]
	fmt.Println(refused.Name)
	for _, kv := range refused.Attributes {
		if kv.Key != "redlimit.latency" { // varies
			fmt.Printf("%s=%s\n", kv.Key, kv.Value.String())
		}
	}
	// Output:
	// redlimit.decide
	// redlimit.policy=api
	// redlimit.algorithm=token_bucket
	// redlimit.outcome=denied
	// redlimit.failed_open=false
	// redlimit.cached=false
	// redlimit.leased=false
	// redlimit.fallback=false
	// redlimit.refused_by=1
}
