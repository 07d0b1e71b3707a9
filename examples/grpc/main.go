// Command grpc is the gRPC example server: the standard health service,
// grpc.health.v1.Health, rate limited per peer IP through Redis by
// grpclimit, and server reflection (not limited). Its flags and env vars are those of the example contract in
// examples/README.md that apply to gRPC, with -addr :50051 by default and
// -key ip or metadata:<name>. Try, from the repository's root:
//
//	go run ./examples/grpc -limit 3 -period 10s
//	grpcurl -plaintext -v localhost:50051 grpc.health.v1.Health/Check
//
// A refused call ends with ResourceExhausted, a google.rpc.RetryInfo
// detail, and retry-after and x-ratelimit-* trailers; allowed calls carry
// x-ratelimit-* headers. What the local fallback decides while Redis does
// not answer (-fail open) carries no x-ratelimit-* fields.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/grpclimit"
	"github.com/redlimit/redlimit/httplimit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

// shutdownTimeout bounds the graceful shutdown, so that the process exits
// within 5 s of SIGINT or SIGTERM as the contract says: a Health/Watch
// stream lasts as long as its client wants, and is cut after it.
const shutdownTimeout = 3 * time.Second

// run serves until ctx ends. The flags, the log and the embedded
// miniredis are what an app does its own way; the go-redis client, the
// Limiter, the Policy and the interceptors are the wiring to copy.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stdout, nil)).With("example", "grpc")
	quietRedis.Do(func() { redis.SetLogger(redisLogger{log}) })
	embedded := ""
	switch {
	case cfg.redisURL != "":
		opt, _ := redis.ParseURL(cfg.redisURL) // parseConfig checked it
		log.Info("using redis", "addr", opt.Addr, "db", opt.DB)
	case cfg.redisCluster != nil:
		log.Info("using redis cluster", "seeds", strings.Join(cfg.redisCluster, ","))
	default:
		mini := miniredis.NewMiniRedis()
		if err := mini.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("start the embedded miniredis: %w", err)
		}
		defer mini.Close()
		embedded = mini.Addr()
		log.Info("no -redis or -redis-cluster given: using an embedded in-process miniredis; "+
			"limits are not shared with other processes and are lost on exit", "addr", embedded)
	}

	// One client and one Limiter for the whole process.
	rdb := redis.NewUniversalClient(cfg.redisOptions(embedded))
	defer func() {
		if err := rdb.Close(); err != nil {
			log.Warn("closing the redis client", "err", err)
		}
	}()
	// The Limiter logs Redis failing and answering again, and a Redis that
	// may evict its keys. Its deny cache answers a client that comes back
	// before its retry-after without asking Redis. What Redis cannot
	// decide within the timeout, its local fallback (core's default)
	// decides: each instance its share of the limit, so -fail open is
	// bounded, never unlimited.
	limiter, err := core.New(rdb, core.WithTimeout(cfg.timeout), core.WithLogger(log), core.WithDenyCache(10000))
	if err != nil {
		return err
	}
	// Ask Redis once at start: a wrong address shows now, not at the first
	// call, and the Limiter warns if Redis may evict its keys.
	if _, err := limiter.Ping(ctx); err != nil {
		log.Warn("redis check failed at start; the fail policy applies until it answers", "err", err)
	}

	// Per peer IP (the address of the connection: no forwarding metadata
	// is believed, since no proxy is trusted here), or per metadata value
	// with the peer IP for calls without it.
	key, err := httplimit.KeyByIP(httplimit.ClientIP{})
	if err != nil {
		return err
	}
	if name, ok := strings.CutPrefix(cfg.key, "metadata:"); ok {
		key = httplimit.KeyFirst(grpclimit.KeyByMetadata(name), key)
	}
	policy, err := httplimit.New(httplimit.Config{
		Limiter:    limiter,
		Name:       "grpc",
		Limit:      cfg.coreLimit(),
		Key:        key,
		FailClosed: cfg.failClosed,
	})
	if err != nil {
		return err
	}
	// Server reflection, for grpcurl and its kin, is not limited.
	skip := grpclimit.WithSkip(func(_ context.Context, fullMethod string) bool {
		return strings.HasPrefix(fullMethod, "/grpc.reflection.")
	})
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(policy, skip)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(policy, skip)),
	)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	log.Info("limiting grpc.health.v1.Health", "limit", cfg.coreLimit().String(), "key", cfg.key,
		"fail", map[bool]string{false: "open", true: "closed"}[cfg.failClosed], "timeout", cfg.timeout)
	return serve(ctx, log, cfg.addr, srv, hs)
}

// serve listens on addr, logs "listening on <addr>" once connections are
// accepted, and serves until ctx ends; then it stops gracefully, within
// shutdownTimeout.
func serve(ctx context.Context, log *slog.Logger, addr string, srv *grpc.Server, hs *health.Server) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The listener accepts (into its backlog) from here on.
	log.Info("listening on "+shownAddr(addr, ln.Addr()), "bound", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	hs.Shutdown() // watchers hear NOT_SERVING
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop() // no new calls; waits for those in flight
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownTimeout):
		log.Warn("graceful shutdown did not finish: cutting the calls still open")
		srv.Stop()
		<-stopped
	}
	log.Info("stopped")
	return nil
}

// shownAddr is the address for the "listening on" line: -addr as given
// (":50051", not "[::]:50051"), unless it left the port to the system
// (port 0), which only the bound address tells.
func shownAddr(addr string, bound net.Addr) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port != "0" && port != "" {
		return addr
	}
	return bound.String()
}

// quietRedis routes go-redis' own log lines (one per failed dial) to our
// log at debug level, hidden by default: the Limiter logs failures once
// per change of state. The go-redis logger is process-wide.
var quietRedis sync.Once

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}
