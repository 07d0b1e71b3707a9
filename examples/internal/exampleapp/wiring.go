package exampleapp

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/prommetrics"
)

// wire is the redlimit wiring every framework shares, what an app of yours
// would copy: one Redis client, one Limiter and one Policy for the whole
// process, and with -metrics the collector the Policy reports to.
func (a *App) wire(ctx context.Context) error {
	cfg := a.Config
	// With ContextTimeoutEnabled, go-redis stops at a context's deadline
	// on the socket itself: the Limiter's timeout then ends a call Redis
	// is slow to answer, and the fail policy answers the request.
	opts := a.RedisOptions() // -redis, -redis-cluster, or the embedded miniredis
	opts.ContextTimeoutEnabled = true
	a.rdb = redis.NewUniversalClient(opts)
	// The Limiter logs Redis failing and answering again, and a Redis that
	// may evict its keys. Its deny cache answers a client that comes back
	// before its Retry-After without asking Redis, which keeps a flood off it.
	limiter, err := core.New(a.rdb, core.WithTimeout(cfg.Timeout), core.WithLogger(a.Log), core.WithDenyCache(10000))
	if err != nil {
		return err
	}
	// Ask Redis once at start: a wrong address shows now, not at the first
	// request, and the Limiter warns if Redis may evict its keys.
	if _, err := limiter.Ping(ctx); err != nil {
		a.Log.Warn("redis check failed at start; the fail policy applies until it answers", "err", err)
	}
	var observers []httplimit.Observer
	if cfg.Metrics {
		var c *prommetrics.Collector
		c, a.Metrics = metrics(limiter)
		observers = []httplimit.Observer{c}
	}
	a.Policy, err = httplimit.New(httplimit.Config{
		Limiter:   limiter,
		Limit:     cfg.CoreLimit(),
		Key:       cfg.KeyFunc(),
		Fail:      cfg.Fail,
		Headers:   cfg.Headers,
		MaxWait:   cfg.LeakyMaxWait(),
		Observers: observers,
		// -concurrency: requests of a key in flight at once, on every
		// instance on this Redis (0: no limit).
		InFlight:      cfg.Concurrency,
		InFlightLease: cfg.ConcurrencyLease,
		Settle:        true, // handlers may report what a request really cost (GET /spend)
	})
	return err
}

// metrics is what -metrics adds: the collector the Policy reports every
// decision to, and the handler of GET /metrics, which serves a registry of
// its own (the decisions, those made on l directly too, the health of l's
// Redis, Go and process metrics).
func metrics(l *core.Limiter) (*prommetrics.Collector, http.Handler) {
	c := prommetrics.New(prommetrics.WithLimiter(l))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return c, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
