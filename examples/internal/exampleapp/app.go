// Package exampleapp is what the six HTTP example servers share: flags and
// env vars, the log, the embedded miniredis, the wiring of redlimit that no
// framework changes (the go-redis client, the Limiter, its start-up Ping,
// the Policy; see wiring.go, the part to copy into an app), the Prometheus
// registry, serving with a graceful shutdown, and what the demo routes GET
// /slow and GET /spend read from their query. Each example's main.go then
// holds only what is its framework's: the middleware on the routes and a
// handler that reports its request's cost. The behaviour all examples share
// is the example contract in examples/README.md.
package exampleapp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"

	"github.com/redlimit/redlimit/httplimit"
)

// App is an example server's configuration, the Policy its middleware
// takes, and what it runs beside the framework (the log, the Redis client,
// the embedded Redis).
type App struct {
	// Config is the parsed command line and environment.
	Config Config
	// Log writes the server's log lines (to run's stdout).
	Log *slog.Logger
	// Policy decides the limited routes' requests, as the flags say; one
	// middleware made of it puts every route it is on under one limit.
	Policy *httplimit.Policy
	// Metrics serves GET /metrics with -metrics; nil without.
	Metrics http.Handler
	// Embedded reports that neither -redis nor -redis-cluster was given:
	// the server runs on an in-process miniredis (RedisOptions points at
	// it).
	Embedded bool

	mini    *miniredis.Miniredis
	rdb     redis.UniversalClient
	limiter *core.Limiter
}

// Setup parses the configuration (see ParseConfig), makes the log, starts
// the embedded miniredis when no Redis is given, and wires the Redis
// client, the Limiter and the Policy (see wire). ctx bounds the start-up
// Ping. The caller must Close the App. name is the program's name, for -h
// and the log.
func Setup(ctx context.Context, name string, args []string, getenv func(string) string, stdout io.Writer) (*App, error) {
	cfg, err := ParseConfig(name, args, getenv, stdout)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil)).With("example", name)
	quietRedis.Do(func() { redis.SetLogger(redisLogger{log}) })
	a := &App{Config: cfg, Log: log}
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
	limit := cfg.CoreLimit()
	log.Info("limiting GET /, /slow and /spend", "limit", limit.String(), "capacity", limit.Capacity(),
		"key", cfg.Key, "fail", FailName(cfg.FailClosed), "timeout", cfg.Timeout, "headers", string(headers),
		"concurrency", cfg.Concurrency)
	if err := a.wire(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close closes the Limiter and the Redis client (logging their errors) and
// stops the embedded miniredis, if any. Call it once the server has
// drained: a request decided after it is refused.
func (a *App) Close() {
	if a.limiter != nil {
		if err := a.limiter.Close(); err != nil {
			a.Log.Warn("closing the limiter", "err", err)
		}
		a.limiter = nil
	}
	if a.rdb != nil {
		if err := a.rdb.Close(); err != nil {
			a.Log.Warn("closing the redis client", "err", err)
		}
		a.rdb = nil
	}
	if a.mini != nil {
		a.mini.Close()
		a.mini = nil
	}
}

// quietRedis routes go-redis' own log lines (one per failed dial) to our
// log at debug level, hidden by default: the Limiter logs failures once per
// change of state. The go-redis logger is process-wide.
var quietRedis sync.Once

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}
