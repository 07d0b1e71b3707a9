package exampleapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/redlimit/redlimit/core"
)

// ShutdownTimeout bounds the graceful shutdown, so the process exits within
// 5 s of SIGINT or SIGTERM as the contract says.
const ShutdownTimeout = 3 * time.Second

// denyCacheKeys bounds the deny cache: the clients remembered as denied.
const denyCacheKeys = 10000

// App is what an example server needs to wire its framework: the Limiter
// and the middleware's settings, ready to pass to an adapter.
type App struct {
	// Config is the parsed configuration.
	Config Config
	// Log writes the server's log lines (to run's stdout).
	Log *slog.Logger
	// Limiter decides, with -timeout, on the configured Redis.
	Limiter *core.Limiter
	// Limit is the quota that -algorithm, -limit, -period and -burst say.
	Limit core.Limit
	// Key keys requests as -key says.
	Key core.KeyFunc
	// Headers is -headers.
	Headers core.HeaderStyle
	// Fail is -fail.
	Fail core.FailPolicy
	// MaxWait is -max-wait for leaky_bucket (default: the period); 0 for the
	// other algorithms.
	MaxWait time.Duration
	// Observer feeds the metrics when -metrics is set; nil otherwise.
	Observer core.Observer
	// Metrics serves GET /metrics (never limited) when -metrics is set; nil
	// otherwise.
	Metrics http.Handler

	close func()
}

// Setup parses the configuration (see ParseConfig) and connects to Redis.
// The caller must Close the App. name is the program's name, for -h and the
// log.
func Setup(ctx context.Context, name string, args []string, getenv func(string) string, stdout io.Writer) (*App, error) {
	cfg, err := ParseConfig(name, args, getenv, stdout)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil)).With("example", name)
	a := &App{
		Config:  cfg,
		Log:     log,
		Limit:   cfg.CoreLimit(),
		Key:     cfg.KeyFunc(),
		Headers: cfg.Headers,
		Fail:    cfg.Fail,
		MaxWait: cfg.LeakyMaxWait(),
	}
	if cfg.Metrics {
		a.Observer, a.Metrics = newMetrics()
	}
	rdb, where, closeRedis, err := newRedis(cfg, log)
	if err != nil {
		return nil, err
	}
	a.close = closeRedis
	// The Limiter logs Redis failing and answering again, once per change.
	// The deny cache answers a client that keeps knocking after a denial
	// without asking Redis until its Retry-After has passed: it keeps a
	// flood off Redis, and off the embedded miniredis most of all, which
	// runs a few thousand scripts per second.
	a.Limiter = core.New(rdb, core.WithTimeout(cfg.Timeout), core.WithLogger(log),
		core.WithDenyCache(denyCacheKeys))
	ping(ctx, log, rdb, where, cfg.Timeout)
	log.Info("limiting / (GET, HEAD)",
		"algorithm", a.Limit.Algorithm.String(), "limit", a.Limit.Rate, "period", a.Limit.Period,
		"capacity", a.Limit.Capacity(), "key", cfg.Key, "fail", failName(cfg.Fail), "timeout", cfg.Timeout)
	return a, nil
}

func failName(f core.FailPolicy) string {
	if f == core.FailClosed {
		return "closed"
	}
	return "open"
}

// Close releases Redis (and stops the embedded one).
func (a *App) Close() {
	if a.close != nil {
		a.close()
		a.close = nil
	}
}

// Server is what Serve runs: *http.Server has this shape, and the Fiber
// example adapts its app to it.
type Server interface {
	// Serve accepts connections on l until Shutdown.
	Serve(l net.Listener) error
	// Shutdown stops accepting and waits for the requests in flight, at
	// most until ctx ends.
	Shutdown(ctx context.Context) error
}

// NewHTTPServer is the *http.Server the net/http, Gin and Echo examples
// serve h with.
func (a *App) NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn),
	}
}

// Serve listens on -addr, logs "listening on <addr>" once connections are
// accepted, and serves with srv until ctx ends (SIGINT
// or SIGTERM in main); then it shuts srv down gracefully, within
// ShutdownTimeout, and returns nil.
func (a *App) Serve(ctx context.Context, srv Server) error {
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The listener accepts (into its backlog) from here on.
	a.Log.Info("listening on "+shownAddr(a.Config.Addr, ln.Addr()), "bound", ln.Addr().String())
	select {
	case err := <-errc:
		_ = ln.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	a.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		a.Log.Warn("graceful shutdown did not finish: exiting anyway", "err", err)
		return nil
	}
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.Log.Warn("serve ended with an error", "err", err)
		}
	case <-sctx.Done():
	}
	a.Log.Info("stopped")
	return nil
}

// shownAddr is the address for the "listening on" line: -addr as given (the
// contract's <addr>: ":8080", not "[::]:8080"), unless it left the port to
// the system (port 0), which only the bound address tells.
func shownAddr(addr string, bound net.Addr) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port != "0" && port != "" {
		return addr
	}
	return bound.String()
}
