package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoylimit"
	"github.com/redlimit/redlimit/prommetrics"
)

const serveUsage = `usage: redlimit serve -redis URL | -redis-cluster ADDRS -config FILE_OR_DIR [flags]

Serves Envoy's rate limit service (envoy.service.ratelimit.v3) on -grpc-addr
from envoyproxy/ratelimit's configuration, and /healthz (or /healthcheck)
and Prometheus' /metrics on -http-addr, until SIGINT or SIGTERM.`

// serve runs `redlimit serve`; its flags are its own, after the word.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	errw := &syncWriter{w: stderr} // the Limiter logs from its own goroutines
	defer errw.close()
	stderr = errw
	fs := flag.NewFlagSet("redlimit serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { _, _ = fmt.Fprintln(stderr, serveUsage); fs.PrintDefaults() }
	url := fs.String("redis", "", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default $REDIS_URL)")
	cluster := fs.String("redis-cluster", "", "comma-separated Redis Cluster seed addresses (default $REDIS_CLUSTER_ADDRS)")
	cfg := envoylimit.Config{}
	fs.StringVar(&cfg.Path, "config", "", "envoyproxy/ratelimit's configuration: a YAML file, or a directory of them (required)")
	grpcAddr := fs.String("grpc-addr", ":8081", "the gRPC address Envoy calls")
	httpAddr := fs.String("http-addr", ":8080", `the address of /healthz, /healthcheck and /metrics ("" for none)`)
	prefix := fs.String("prefix", "ratelimit", "the Limiter's key prefix (core.WithPrefix)")
	timeout := fs.Duration("timeout", 0, "bound on each decision's Redis call (core.WithTimeout; 0: core's default)")
	fs.BoolVar(&cfg.Headers, "headers", false, "add RateLimit-Limit, -Remaining and -Reset to the responses (response_headers_to_add)")
	fs.BoolVar(&cfg.EnvoyFailureMode, "envoy-failure-mode", false,
		"answer a request Redis' failure left undecided with UNAVAILABLE, for Envoy's failure_mode_deny, without the local fallback (default: the local fallback decides)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || cfg.Path == "" {
		fs.Usage()
		return 2
	}
	rdb, err := client(*url, *cluster, getenv)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "redlimit serve:", err)
		return 2
	}
	defer func() { _ = rdb.Close() }()
	lim, err := core.New(rdb, limiterOptions(*prefix, *timeout, cfg.EnvoyFailureMode, stderr)...)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "redlimit serve:", err)
		return 2
	}
	defer func() { _ = lim.Close() }() // after the servers have drained
	reg := prometheus.NewRegistry()
	// prommetrics counts the Limiter's decisions too, those its local
	// fallback made while Redis did not answer among them
	// (redlimit_degraded_decisions_total{reason="fallback"}), which
	// envoyproxy/ratelimit's series have no place for.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prommetrics.New(prommetrics.WithLimiter(lim)))
	cfg.Limiter, cfg.Metrics = lim, reg
	srv, err := envoylimit.New(cfg)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "redlimit serve:", err)
		return 1
	}
	defer func() { _ = srv.Close() }()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	if err := listen(ctx, srv, reg, *grpcAddr, *httpAddr, stdout); err != nil {
		_, _ = fmt.Fprintln(stderr, "redlimit serve:", err)
		return 1
	}
	return 0
}

// limiterOptions are the Limiter's options. Its local fallback stays on
// (core's default: a bounded share per instance while Redis fails) unless
// the user asked Envoy to decide during a fault: then a Redis failure
// reaches envoylimit undecided and is answered UNAVAILABLE
// (TestServeOutside/redis_paused checks both).
func limiterOptions(prefix string, timeout time.Duration, envoyFailureMode bool, stderr io.Writer) []core.Option {
	opts := []core.Option{core.WithPrefix(prefix), core.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))}
	if timeout > 0 {
		opts = append(opts, core.WithTimeout(timeout))
	}
	if envoyFailureMode {
		opts = append(opts, core.WithLocalFallback(0, 0))
	}
	return opts
}

// listen serves gRPC and HTTP until ctx ends, then drains both.
func listen(ctx context.Context, srv *envoylimit.Server, reg *prometheus.Registry, grpcAddr, httpAddr string, stdout io.Writer) error {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	var draining atomic.Bool
	var hsrv *http.Server
	if httpAddr != "" {
		hl, err := net.Listen("tcp", httpAddr)
		if err != nil {
			gs.Stop()
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		healthy := func(w http.ResponseWriter, _ *http.Request) {
			if draining.Load() {
				http.Error(w, "draining", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		}
		mux.HandleFunc("GET /healthz", healthy)
		mux.HandleFunc("GET /healthcheck", healthy) // envoyproxy/ratelimit's, where its users' probes look
		hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- hsrv.Serve(hl) }()
		httpAddr = hl.Addr().String()
	}
	_, _ = fmt.Fprintf(stdout, "redlimit serve: gRPC on %s, HTTP on %s\n", gl.Addr(), or(httpAddr, "(none)"))
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	hs.Shutdown() // Envoy's health checks see it going, and probes over HTTP
	draining.Store(true)
	drained := make(chan struct{})
	go func() { gs.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		gs.Stop()
	}
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hsrv.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// syncWriter serializes the writes of serve and of the Limiter's
// goroutines, and drops those made after serve has returned.
type syncWriter struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return len(p), nil
	}
	return s.w.Write(p)
}

func (s *syncWriter) close() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
