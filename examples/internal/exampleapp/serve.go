package exampleapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// RunFunc is an example server's testable body: it serves until ctx ends.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Main runs run with the process's arguments, environment and stdout until
// SIGINT or SIGTERM, and exits with status 1 and the error on failure. -h
// is no failure.
func Main(run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, filepath.Base(os.Args[0])+":", err)
		os.Exit(1)
	}
}

// ShutdownTimeout bounds the graceful shutdown, so the process exits within
// 5 s of SIGINT or SIGTERM as the contract says.
const ShutdownTimeout = 3 * time.Second

// ServeHandler serves h with an *http.Server, as Serve does.
func (a *App) ServeHandler(ctx context.Context, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.Log.Handler(), slog.LevelWarn),
	}
	return a.Serve(ctx, srv.Serve, srv.Shutdown)
}

// Serve listens on -addr, logs "listening on <addr>" once connections are
// accepted, and runs serve on the listener until ctx ends (SIGINT or
// SIGTERM in Main); then it calls shutdown, which must stop serve and wait
// for the requests in flight, gives it ShutdownTimeout, and returns nil.
func (a *App) Serve(ctx context.Context, serve func(net.Listener) error, shutdown func(context.Context) error) error {
	ln, err := net.Listen("tcp", a.Config.Addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- serve(ln) }()
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
	if err := shutdown(sctx); err != nil {
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
