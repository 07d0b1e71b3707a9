package envoylimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/observe"
)

// Config is what New makes a Server of.
type Config struct {
	// Limiter decides every descriptor, on its Redis. Required.
	Limiter *core.Limiter
	// Path is the configuration, in envoyproxy/ratelimit's format: a YAML
	// file, or a directory whose .yaml and .yml files (not those whose
	// names start with '.') each hold a domain. Required. It is looked at
	// every second, and loaded again when its files change; one that does
	// not load is logged (the Limiter's Logger) and counted, and the last
	// good configuration stays.
	Path string
	// Headers adds RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
	// to each response's response_headers_to_add. Default: false.
	Headers bool
	// EnvoyFailureMode answers a request that the Limiter could not decide
	// with the gRPC status UNAVAILABLE, so that Envoy's failure_mode_deny
	// decides (by Envoy's default, admits it). The Limiter's local fallback,
	// on by default, decides first: for Envoy to decide every Redis
	// failure, build the Limiter with core.WithLocalFallback(0, 0), as
	// redlimit serve -envoy-failure-mode does. Default (false): the request
	// is refused (OVER_LIMIT).
	EnvoyFailureMode bool
	// Metrics registers the series envoyproxy/ratelimit's users alert on
	// (docs/envoy.md lists them). Default (nil): no metrics.
	Metrics prometheus.Registerer
}

// reloadEvery is how often a Server looks at its configuration's files.
var reloadEvery = time.Second

// Server answers envoy.service.ratelimit.v3.RateLimitService: register it
// on a gRPC server with RegisterRateLimitServiceServer of go-control-plane's
// envoy/service/ratelimit/v3. It is safe for concurrent use.
type Server struct {
	limiter          *core.Limiter
	rules            atomic.Pointer[ruleset]
	headers          bool
	envoyFailureMode bool
	metrics          *metrics
	log              *slog.Logger

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New loads the configuration at cfg.Path and returns a Server that
// answers by it, and by what it becomes as Path changes. It returns an
// error that names the file and line of a configuration that does not
// load. Close the Server to stop watching Path.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, errors.New("envoylimit: Config.Limiter is nil")
	case cfg.Path == "":
		return nil, errors.New("envoylimit: Config.Path is empty")
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("envoylimit: Config.Metrics: %w", err)
	}
	s := &Server{
		limiter: cfg.Limiter, headers: cfg.Headers, envoyFailureMode: cfg.EnvoyFailureMode,
		metrics: m, log: observe.Logger(cfg.Limiter), stop: make(chan struct{}), done: make(chan struct{}),
	}
	rs, err := load(cfg.Path, m)
	if err != nil {
		m.unregister(cfg.Metrics)
		return nil, fmt.Errorf("envoylimit: %w", err)
	}
	m.loaded(nil)
	s.rules.Store(rs)
	s.logf(slog.LevelInfo, "envoylimit: configuration loaded", "path", cfg.Path, "domains", rs.names())
	go s.watch(cfg.Path, reloadEvery, rs.stamp)
	return s, nil
}

// Close stops watching the configuration. It does not close the Limiter.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// watch loads the configuration again whenever its files change.
func (s *Server) watch(path string, every time.Duration, seen string) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		seen = s.reload(path, seen)
	}
}

// reload loads the configuration at path again if its files are not as
// seen (a fingerprint, or the error that stopped one), and returns what it
// saw. A configuration that does not load, or files that cannot be
// looked at (a path gone), is reported once until they change, and the
// last good configuration stays.
func (s *Server) reload(path, seen string) string {
	stamp, err := fingerprint(path)
	if err != nil {
		stamp = "unseen: " + err.Error()
	}
	if stamp == seen {
		return seen
	}
	var rs *ruleset
	if err == nil {
		rs, err = load(path, s.metrics)
	}
	if errors.Is(err, errChanging) {
		return seen // look again at the next tick
	}
	s.metrics.loaded(err)
	if err != nil {
		s.logf(slog.LevelError, "envoylimit: configuration refused; the last good one stays", "path", path, "error", err)
		return stamp
	}
	s.rules.Store(rs)
	s.logf(slog.LevelInfo, "envoylimit: configuration reloaded", "path", path, "domains", rs.names())
	// What was read, not what was looked at before: a file added between
	// the two would otherwise be in force under a stamp without it, and
	// its removal then looks like no change at all.
	return rs.stamp
}

func (s *Server) logf(level slog.Level, msg string, args ...any) {
	if s.log != nil {
		s.log.Log(context.Background(), level, msg, args...)
	}
}
