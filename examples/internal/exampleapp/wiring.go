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
// would copy: one Redis client (its options are RedisOptions'), one Limiter
// and one Policy for the whole process, and with -metrics the collector the
// Policy reports to.
func (a *App) wire(ctx context.Context) error {
	cfg := a.Config
	// With ContextTimeoutEnabled, go-redis stops at a context's deadline
	// on the socket itself: the Limiter's timeout then ends a call Redis
	// is slow to answer, and the local fallback or -fail closed answers.
	opts := a.RedisOptions() // -redis, -redis-cluster, or the embedded miniredis
	opts.ContextTimeoutEnabled = true
	a.rdb = redis.NewUniversalClient(opts)
	// The Limiter logs Redis failing and answering again, and a Redis that
	// may evict its keys. Its deny cache answers a client that comes back
	// before its Retry-After without asking Redis, which keeps a flood off it.
	// What Redis cannot decide within the timeout, its local fallback
	// (core's default) decides: each instance its share of the limit, so
	// -fail open is bounded, never unlimited.
	limiter, err := core.New(a.rdb, core.WithTimeout(cfg.Timeout), core.WithLogger(a.Log), core.WithDenyCache(10000))
	if err != nil {
		return err
	}
	a.limiter = limiter // closed by Close, after the server has drained
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
		Limiter:    limiter,
		Limit:      cfg.CoreLimit(),
		Key:        cfg.KeyFunc(),
		FailClosed: cfg.FailClosed,
		Headers:    cfg.Headers,
		MaxWait:    cfg.LeakyMaxWait(),
		Observers:  observers,
		// -concurrency: requests of a key in flight at once, on every
		// instance on this Redis (0: no limit).
		InFlight:      cfg.Concurrency,
		InFlightLease: cfg.ConcurrencyLease,
		Settle:        true, // handlers may report what a request really cost (GET /spend)
	})
	return err
}

// poolSize bounds the connections to each Redis node; they are opened as
// concurrency needs them, beyond warmConns, which go-redis dials at start
// in the background: the first burst after a start then finds them open
// rather than spending its timeout dialling (the local fallback would
// decide what it could not).
const poolSize, warmConns = 128, 16

// RedisOptions are the go-redis options for -redis (its URL's address,
// credentials, database and TLS), -redis-cluster (a ClusterClient, even for
// a single seed), or the embedded miniredis. Dials, reads and writes take
// at most -timeout, and nothing is retried within a request (MaxRetries -1,
// DialerRetries 1): a retried script could count a request twice, a refused
// connection costs next to nothing, and the fail policy is there for
// failures. The pool is larger than go-redis' default (10 per CPU), so that
// a burst of concurrent requests waits for Redis rather than for a
// connection, which would fail them.
func (a *App) RedisOptions() *redis.UniversalOptions {
	t := a.Config.Timeout
	o := &redis.UniversalOptions{
		DialTimeout:   t,
		ReadTimeout:   t,
		WriteTimeout:  t,
		PoolTimeout:   t,
		PoolSize:      poolSize,
		MinIdleConns:  warmConns,
		DialerRetries: 1,
		MaxRetries:    -1,
	}
	switch {
	case a.Config.RedisURL != "":
		u, _ := redis.ParseURL(a.Config.RedisURL) // ParseConfig checked it
		o.Addrs = []string{u.Addr}
		o.Username, o.Password, o.DB = u.Username, u.Password, u.DB
		o.TLSConfig, o.Protocol, o.ClientName = u.TLSConfig, u.Protocol, u.ClientName
	case a.Config.RedisCluster != nil:
		o.Addrs = a.Config.RedisCluster
		// redis.NewUniversalClient makes a single-node client for one
		// address, unless told it is a Cluster.
		o.IsClusterMode = true
	default:
		o.Addrs = []string{a.mini.Addr()}
	}
	return o
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
