// Command redlimit shows and repairs redlimit's state on a live Redis or
// Redis Cluster, for operators:
//
//	redlimit [flags] inspect KEY          every algorithm's state for KEY, decoded
//	redlimit [flags] reset KEY            delete it (core's Limiter.Reset)
//	redlimit [flags] override get NAME    the Overrides store (core.Overrides)
//	redlimit [flags] override set NAME LIMIT [-ttl 1h]
//	redlimit [flags] override delete NAME
//	redlimit [flags] doctor               what the server means for redlimit
//	redlimit serve -redis URL -config FILE   Envoy's rate limit service (redlimit serve -h)
//
// KEY is the key the application limits by (an IP, a user id); with -name
// it is namespaced as the httplimit Policy of that Name does
// ("<name>:<KEY>"; httplimit's default Name is "http"). -prefix is the
// Limiter's core.WithPrefix. Flags may come before or after the words.
// Output is plain text, or one JSON object with -json. The exit status is
// 0 on success, 1 when a command or a doctor check fails, 2 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what every command works with.
type env struct {
	rdb          redis.UniversalClient
	prefix, name string
	json         bool
	ttl          time.Duration
	out          io.Writer
	outErr       error // the first error writing to out
}

// errFailed is a doctor that found a failing check: it has said why.
var errFailed = errors.New("a check failed")

const usage = `usage: redlimit [flags] inspect KEY | reset KEY | override get|set|delete NAME [LIMIT] | doctor
       redlimit serve -h`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return serve(ctx, args[1:], getenv, stdout, stderr)
	}
	fs := flag.NewFlagSet("redlimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { _, _ = fmt.Fprintln(stderr, usage); fs.PrintDefaults() }
	url := fs.String("redis", "", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default $REDIS_URL)")
	cluster := fs.String("redis-cluster", "", "comma-separated Redis Cluster seed addresses (default $REDIS_CLUSTER_ADDRS)")
	e := env{out: stdout}
	fs.StringVar(&e.prefix, "prefix", "ratelimit", "the Limiter's key prefix (core.WithPrefix)")
	fs.StringVar(&e.name, "name", "", `the httplimit Policy Name KEY is namespaced by (its default is "http"); empty: KEY as core sees it`)
	fs.BoolVar(&e.json, "json", false, "print one JSON object")
	fs.DurationVar(&e.ttl, "ttl", 0, "override set: how long the override lasts (0: until deleted)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on the whole command")
	words, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(words) == 0 {
		fs.Usage()
		return 2
	}
	e.rdb, err = client(*url, *cluster, getenv)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "redlimit:", err)
		return 2
	}
	defer func() { _ = e.rdb.Close() }()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	err = dispatch(ctx, &e, words)
	if err == nil {
		err = e.outErr
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = fmt.Fprintln(stderr, usage)
		return 2
	case errors.Is(err, errFailed):
		return 1
	case err != nil:
		_, _ = fmt.Fprintln(stderr, "redlimit:", err)
		return 1
	}
	return 0
}

// parse parses args, flags anywhere among the words, and returns the words.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return words, nil
		}
		words, args = append(words, fs.Arg(0)), fs.Args()[1:]
	}
}

func dispatch(ctx context.Context, e *env, w []string) error {
	switch {
	case len(w) == 2 && w[0] == "inspect":
		return inspectKey(ctx, e, w[1])
	case len(w) == 2 && w[0] == "reset":
		return reset(ctx, e, w[1])
	case len(w) >= 3 && w[0] == "override":
		return override(ctx, e, w[1], w[2], w[3:])
	case len(w) == 1 && w[0] == "doctor":
		return doctor(ctx, e)
	}
	return flag.ErrHelp
}

// client connects to -redis or -redis-cluster; a flag on the command line
// beats the other's environment variable, as in the examples.
func client(url, cluster string, getenv func(string) string) (redis.UniversalClient, error) {
	switch {
	case url != "" && cluster != "":
		return nil, errors.New("-redis and -redis-cluster are exclusive: give one")
	case url == "" && cluster == "":
		url, cluster = getenv("REDIS_URL"), getenv("REDIS_CLUSTER_ADDRS")
		if url != "" && cluster != "" {
			return nil, errors.New("$REDIS_URL and $REDIS_CLUSTER_ADDRS are both set: give -redis or -redis-cluster")
		}
	}
	if cluster != "" {
		var addrs []string
		for a := range strings.SplitSeq(cluster, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}), nil
	}
	if url == "" {
		return nil, errors.New("no Redis: give -redis URL or -redis-cluster ADDRS (or $REDIS_URL, $REDIS_CLUSTER_ADDRS)")
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", url, err)
	}
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), nil
}

// key is KEY as the Limiter sees it: namespaced by the Policy's Name.
func (e *env) key(key string) string {
	if e.name == "" {
		return key
	}
	return e.name + ":" + key
}

// printf prints to out; run reports the first error.
func (e *env) printf(format string, args ...any) {
	if e.outErr == nil {
		_, e.outErr = fmt.Fprintf(e.out, format, args...)
	}
}

// emit prints v as JSON.
func (e *env) emit(v any) error {
	enc := json.NewEncoder(e.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
