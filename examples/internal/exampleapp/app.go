// Package exampleapp is what the example servers share that a real app would
// do its own way: flags and env vars, the log, the embedded miniredis, the
// Prometheus registry, serving with a graceful shutdown, and what the demo
// routes GET /slow and GET /spend read from their query. Each example's
// main.go then shows only the wiring a user copies: the go-redis client, the
// Limiter, the Policy, the middleware on the routes, and a handler that
// reports its request's cost. The behaviour all examples share is the
// example contract in examples/README.md.
package exampleapp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// App is an example server's configuration, ready to pass to redlimit, and
// what it runs beside the framework (the log, the embedded Redis).
type App struct {
	// Config is the parsed command line and environment.
	Config Config
	// Log writes the server's log lines (to run's stdout).
	Log *slog.Logger

	// Limit is the quota that -algorithm, -limit, -period and -burst say.
	Limit core.Limit
	// Key keys requests as -key says.
	Key httplimit.KeyFunc
	// Fail is -fail.
	Fail httplimit.FailPolicy
	// Headers is -headers.
	Headers httplimit.Headers
	// MaxWait is -max-wait for leaky_bucket (default: the period); 0 for
	// the other algorithms.
	MaxWait time.Duration
	// InFlight is -concurrency: how many requests of a key may be in
	// flight at once; 0 for no limit.
	InFlight int
	// InFlightLease is -concurrency-lease: how long a permit outlives a
	// process that died holding it.
	InFlightLease time.Duration
	// Timeout is -timeout, the most one decision may take.
	Timeout time.Duration
	// Embedded reports that neither -redis nor -redis-cluster was given:
	// the server runs on an in-process miniredis (RedisOptions points at
	// it).
	Embedded bool

	mini *miniredis.Miniredis
}

// Setup parses the configuration (see ParseConfig), makes the log, and
// starts the embedded miniredis when no Redis is given. The caller must
// Close the App. name is the program's name, for -h and the log.
func Setup(name string, args []string, getenv func(string) string, stdout io.Writer) (*App, error) {
	cfg, err := ParseConfig(name, args, getenv, stdout)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil)).With("example", name)
	quietRedis.Do(func() { redis.SetLogger(redisLogger{log}) })
	a := &App{
		Config:        cfg,
		Log:           log,
		Limit:         cfg.CoreLimit(),
		Key:           cfg.KeyFunc(),
		Fail:          cfg.Fail,
		Headers:       cfg.Headers,
		MaxWait:       cfg.LeakyMaxWait(),
		Timeout:       cfg.Timeout,
		InFlight:      cfg.Concurrency,
		InFlightLease: cfg.ConcurrencyLease,
	}
	switch {
	case cfg.RedisURL != "":
		opt, _ := redis.ParseURL(cfg.RedisURL) // ParseConfig checked it
		log.Info("using redis", "addr", opt.Addr, "db", opt.DB)
	case cfg.RedisCluster != nil:
		log.Info("using redis cluster", "seeds", strings.Join(cfg.RedisCluster, ","))
	default:
		a.mini = miniredis.NewMiniRedis()
		if err := a.mini.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start the embedded miniredis: %w", err)
		}
		a.Embedded = true
		log.Info("no -redis or -redis-cluster given: using an embedded in-process miniredis; "+
			"limits are not shared with other processes and are lost on exit", "addr", a.mini.Addr())
	}
	headers, _ := cfg.Headers.MarshalText() // built-in styles only
	log.Info("limiting GET /, /slow and /spend", "limit", a.Limit.String(), "capacity", a.Limit.Capacity(),
		"key", cfg.Key, "fail", cfg.Fail.String(), "timeout", cfg.Timeout, "headers", string(headers),
		"concurrency", cfg.Concurrency)
	return a, nil
}

// Close stops the embedded miniredis, if any.
func (a *App) Close() {
	if a.mini != nil {
		a.mini.Close()
		a.mini = nil
	}
}

// poolSize bounds the connections to each Redis node; they are opened as
// concurrency needs them.
const poolSize = 128

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

// quietRedis routes go-redis' own log lines (one per failed dial) to our
// log at debug level, hidden by default: the Limiter logs failures once per
// change of state. The go-redis logger is process-wide.
var quietRedis sync.Once

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}
