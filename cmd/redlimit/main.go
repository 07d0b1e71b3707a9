// Command redlimit shows and repairs redlimit's state on a live Redis or
// Redis Cluster, for operators:
//
//	redlimit [flags] inspect CLIENT       every algorithm's state for CLIENT, decoded
//	redlimit [flags] reset CLIENT         delete it (core's Limiter.Reset), on every instance
//	redlimit [flags] override get NAME    the Overrides store (core.Overrides)
//	redlimit [flags] override set NAME LIMIT [-ttl 1h]
//	redlimit [flags] override delete NAME
//	redlimit [flags] doctor               what the server means for redlimit
//	redlimit serve -redis URL -config FILE   Envoy's rate limit service (redlimit serve -h)
//
// CLIENT is what the operator knows, and the key is formed from it exactly
// as httplimit forms it (package internal/keyspace; docs/operations.md,
// "How keys are formed"): a client IP by default ("ip:203.0.113.9", IPv6
// by its /64), a header's value with -header NAME, a Scope's key with
// -scope NAME, a key function's own key with -key, all under the Policy
// -name (default "http", httplimit's); -core takes CLIENT as the key the
// Limiter is called with. -prefix is the Limiter's core.WithPrefix. Flags
// may come before or after the words. Output is plain text, or one JSON
// object with -json, errors included. The exit status is 0 on success, 1
// when a command finds nothing or fails, or a doctor check fails, 2 on bad
// usage.
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
	addr         address
	json         bool
	ttl          time.Duration
	out          io.Writer
	outErr       error // the first error writing to out
}

// errFailed is a doctor that found a failing check: it has said why.
var errFailed = errors.New("a check failed")

const usage = `usage: redlimit [flags] inspect CLIENT | reset CLIENT | override get|set|delete NAME [LIMIT] | doctor
       redlimit serve -h
CLIENT: an IP (203.0.113.9, 2001:db8::1); with -header NAME that header's value;
with -key the key your Config.Key returned; with -scope NAME that Scope's key
(none for a Scope without a Key); with -core a key as core.Limiter is called with.`

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
	fs.StringVar(&e.name, "name", "http", "the httplimit Policy's Name (Config.Name)")
	e.addr.flags(fs)
	fs.BoolVar(&e.json, "json", false, "print one JSON object, errors included")
	fs.DurationVar(&e.ttl, "ttl", 0, "override set: how long the override lasts (0: until deleted)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on the whole command")
	words, err := parse(fs, args)
	if err != nil {
		e.json = wantsJSON(args)
		return e.fail(stderr, err, 2)
	}
	if len(words) == 0 {
		fs.Usage()
		return e.fail(stderr, errors.New("no command"), 2)
	}
	if err := e.addr.check(e.name); err != nil {
		return e.say(stderr, err, 2)
	}
	e.rdb, err = client(*url, *cluster, getenv)
	if err != nil {
		return e.say(stderr, err, 2)
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
		return e.fail(stderr, errors.New("bad usage: "+strings.Join(words, " ")), 2)
	case errors.Is(err, errUsage):
		return e.say(stderr, err, 2)
	case errors.Is(err, errFailed):
		return 1
	case err != nil:
		return e.say(stderr, err, 1)
	}
	return 0
}

// say prints err on stderr, and is fail.
func (e *env) say(stderr io.Writer, err error, code int) int {
	_, _ = fmt.Fprintln(stderr, "redlimit:", err)
	return e.fail(stderr, err, code)
}

// fail returns code and, with -json, prints err as the one JSON object
// on stdout that every outcome prints (the text went to stderr).
func (e *env) fail(stderr io.Writer, err error, code int) int {
	if e.json {
		if werr := e.emit(errorJSON{err.Error(), code}); werr != nil {
			_, _ = fmt.Fprintln(stderr, "redlimit:", werr)
		}
	}
	return code
}

// errorJSON is what -json prints for a command that could not run.
type errorJSON struct {
	Error string `json:"error"`
	Exit  int    `json:"exit"`
}

// wantsJSON reports whether args asked for -json, when they do not parse.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch strings.TrimLeft(a, "-") {
		case "json", "json=true", "json=1":
			return strings.HasPrefix(a, "-")
		}
	}
	return false
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
	case len(w) <= 2 && w[0] == "inspect":
		return inspectKey(ctx, e, w[1:])
	case len(w) <= 2 && w[0] == "reset":
		return reset(ctx, e, w[1:])
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
