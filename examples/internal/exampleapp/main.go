package exampleapp

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is an example server's testable body: it serves until ctx ends.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Main runs run with the process's arguments, environment and stdout until
// SIGINT or SIGTERM, and exits with status 1 and the error on failure.
func Main(name string, run RunFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
