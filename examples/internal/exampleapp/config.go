package exampleapp

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
)

// Config is the parsed command line and environment of an example server,
// the flags of the example contract (examples/README.md).
type Config struct {
	// Addr is the listen address. Default ":8080".
	Addr string
	// RedisURL is the Redis URL ("redis://host:port/db"); "" for none.
	RedisURL string
	// RedisCluster are Redis Cluster seed addresses; nil for none. With
	// neither, the server runs an embedded miniredis.
	RedisCluster []string
	// Algorithm enforces the limit. Default token_bucket.
	Algorithm core.Algorithm
	// Limit is the requests allowed per Period. Default 10.
	Limit int
	// Period is the limit's period. Default 1s.
	Period time.Duration
	// Burst is the token bucket's capacity or the leaky bucket's queue
	// length. Default (0): Limit.
	Burst int
	// Key is "ip" or "header:<Name>". Default "ip".
	Key string
	// FailClosed refuses requests when Redis cannot answer (-fail closed).
	// Default false: -fail open, where the Limiter's local fallback
	// decides them with this instance's share of the limit.
	FailClosed bool
	// Timeout bounds one decision. Default 100ms.
	Timeout time.Duration
	// Headers are the rate-limit response fields. Default xratelimit.
	Headers httplimit.Headers
	// MaxWait is the longest a leaky_bucket request is held. Default (0):
	// Period.
	MaxWait time.Duration
	// Metrics serves Prometheus metrics at GET /metrics. Default false.
	Metrics bool
	// Concurrency is how many requests of a key may be in flight at once,
	// across every instance on the same Redis. Default 0: no limit.
	Concurrency int
	// ConcurrencyLease is how long a permit outlives a process that died
	// holding it. Default 10s.
	ConcurrencyLease time.Duration
}

// option is one row of the contract's table: a flag and its env var.
type option struct {
	flag, env, usage string
}

var options = []option{
	{"addr", "ADDR", "listen address"},
	{"redis", "REDIS_URL", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default: an embedded miniredis)"},
	{"redis-cluster", "REDIS_CLUSTER_ADDRS", "comma-separated Redis Cluster seed addresses"},
	{"algorithm", "ALGORITHM", "token_bucket, sliding_window, sliding_window_counter, fixed_window or leaky_bucket"},
	{"limit", "LIMIT", "requests allowed per period"},
	{"period", "PERIOD", "period of the limit (Go duration)"},
	{"burst", "BURST", "capacity of token_bucket, queue length of leaky_bucket (default: = limit)"},
	{"key", "KEY", "ip, or header:<Name> (e.g. header:X-API-Key; requests without it are keyed by IP)"},
	{"fail", "FAIL", "open or closed: when Redis cannot answer within the timeout, open lets this instance decide with its share of the limit (bounded, never unlimited), closed answers 503"},
	{"timeout", "TIMEOUT", "the most one decision may wait for Redis before -fail applies"},
	{"headers", "HEADERS", "xratelimit, ietf, both or none"},
	{"max-wait", "MAX_WAIT", "leaky_bucket only: the longest a request is held before it proceeds (default: = period)"},
	{"metrics", "METRICS", "serve Prometheus metrics at GET /metrics"},
	{"concurrency", "CONCURRENCY", "at most this many requests in flight per key, across every instance on the same Redis (0: no limit)"},
	{"concurrency-lease", "CONCURRENCY_LEASE", "how long an in-flight permit outlives a process that died holding it"},
}

// ParseConfig parses args (without the program name) and the environment
// that getenv reads, as the contract says: each flag may come from its env
// var, and a flag on the command line wins. An invalid value is an error
// that names the flag. -h prints the usage to stdout and returns
// flag.ErrHelp.
func ParseConfig(name string, args []string, getenv func(string) string, stdout io.Writer) (Config, error) {
	cfg := Config{Addr: ":8080", Limit: 10, Period: time.Second, Key: "ip", Timeout: 100 * time.Millisecond,
		ConcurrencyLease: 10 * time.Second}
	var cluster string
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	usage := map[string]string{}
	for _, o := range options {
		usage[o.flag] = o.usage + " [$" + o.env + "]"
	}
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, usage["addr"])
	fs.StringVar(&cfg.RedisURL, "redis", "", usage["redis"])
	fs.StringVar(&cluster, "redis-cluster", "", usage["redis-cluster"])
	// The library's types parse their own text: what a flag accepts is what
	// a config file would.
	fs.TextVar(&cfg.Algorithm, "algorithm", core.TokenBucket, usage["algorithm"])
	fs.IntVar(&cfg.Limit, "limit", cfg.Limit, usage["limit"])
	fs.DurationVar(&cfg.Period, "period", cfg.Period, usage["period"])
	fs.IntVar(&cfg.Burst, "burst", 0, usage["burst"])
	fs.StringVar(&cfg.Key, "key", cfg.Key, usage["key"])
	fs.Func("fail", usage["fail"], FailFlag(&cfg.FailClosed))
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, usage["timeout"])
	fs.TextVar(&cfg.Headers, "headers", httplimit.Headers{httplimit.XRateLimit{}}, usage["headers"])
	fs.DurationVar(&cfg.MaxWait, "max-wait", 0, usage["max-wait"])
	fs.BoolVar(&cfg.Metrics, "metrics", false, usage["metrics"])
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, usage["concurrency"])
	fs.DurationVar(&cfg.ConcurrencyLease, "concurrency-lease", cfg.ConcurrencyLease, usage["concurrency-lease"])

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			_, _ = fmt.Fprintf(stdout, "Usage of %s (each flag may also come from the env var in brackets; the flag wins):\n", name)
			fs.PrintDefaults()
		}
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q (all settings are flags, see -h)", fs.Arg(0))
	}
	// The environment fills in what the command line did not set.
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	envOf := map[string]string{}
	for _, o := range options {
		envOf[o.flag] = o.env
		v := getenv(o.env)
		if v == "" || onCommandLine[o.flag] {
			continue
		}
		if err := fs.Set(o.flag, v); err != nil {
			return Config{}, fmt.Errorf("invalid value %q for $%s (flag -%s): %w", v, o.env, o.flag, err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	where := func(name string) string {
		if set[name] && !onCommandLine[name] {
			return "-" + name + " ($" + envOf[name] + ")"
		}
		return "-" + name
	}

	if cluster != "" {
		for a := range strings.SplitSeq(cluster, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return Config{}, fmt.Errorf("invalid %s: %q is not host:port", where("redis-cluster"), a)
			}
			cfg.RedisCluster = append(cfg.RedisCluster, a)
		}
		if len(cfg.RedisCluster) == 0 {
			return Config{}, fmt.Errorf("invalid %s: no address in %q", where("redis-cluster"), cluster)
		}
	}
	if cfg.RedisURL != "" && cfg.RedisCluster != nil {
		// A flag on the command line beats the other one's env var.
		switch url, cl := onCommandLine["redis"], onCommandLine["redis-cluster"]; {
		case url && !cl:
			cfg.RedisCluster = nil
		case cl && !url:
			cfg.RedisURL = ""
		default:
			return Config{}, fmt.Errorf("%s and %s are exclusive: give one", where("redis"), where("redis-cluster"))
		}
	}
	if cfg.RedisURL != "" {
		if _, err := redis.ParseURL(cfg.RedisURL); err != nil {
			return Config{}, fmt.Errorf("invalid %s: %w", where("redis"), err)
		}
	}
	if cfg.Limit < 1 {
		return Config{}, fmt.Errorf("invalid %s: must be >= 1, got %d", where("limit"), cfg.Limit)
	}
	if cfg.Period <= 0 {
		return Config{}, fmt.Errorf("invalid %s: must be > 0, got %v", where("period"), cfg.Period)
	}
	if set["burst"] && cfg.Burst < 1 {
		return Config{}, fmt.Errorf("invalid %s: must be >= 1, got %d", where("burst"), cfg.Burst)
	}
	if cfg.Timeout <= 0 {
		return Config{}, fmt.Errorf("invalid %s: must be > 0, got %v", where("timeout"), cfg.Timeout)
	}
	if set["max-wait"] && cfg.MaxWait <= 0 {
		return Config{}, fmt.Errorf("invalid %s: must be > 0, got %v", where("max-wait"), cfg.MaxWait)
	}
	if cfg.Concurrency < 0 || cfg.Concurrency > maxConcurrency {
		return Config{}, fmt.Errorf("invalid %s: must be from 0 (no limit) to %d, got %d", where("concurrency"), maxConcurrency, cfg.Concurrency)
	}
	if cfg.ConcurrencyLease < time.Millisecond {
		return Config{}, fmt.Errorf("invalid %s: must be >= 1ms, got %v", where("concurrency-lease"), cfg.ConcurrencyLease)
	}
	if cfg.Key != "ip" {
		h, ok := strings.CutPrefix(cfg.Key, "header:")
		if !ok || !validHeaderName(h) {
			return Config{}, fmt.Errorf("invalid %s %q: want ip or header:<Name>, e.g. header:X-API-Key", where("key"), cfg.Key)
		}
	}
	if err := cfg.CoreLimit().Validate(); err != nil {
		return Config{}, fmt.Errorf("invalid -limit, -period or -burst: %w", err)
	}
	return cfg, nil
}

// maxConcurrency is the most requests in flight a core.InFlight limit
// takes.
const maxConcurrency = 1 << 20

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar(s[i]) {
			return false
		}
	}
	return true
}

// tokenChar reports whether c may be in a header name (RFC 9110's tchar).
func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// CoreLimit is the Limit that -algorithm, -limit, -period and -burst say.
func (c Config) CoreLimit() core.Limit {
	l := core.Limit{Algorithm: c.Algorithm, Rate: c.Limit, Period: c.Period}
	if c.Algorithm == core.TokenBucket || c.Algorithm == core.LeakyBucket {
		l.Burst = c.Burst
	}
	return l
}

// KeyFunc is the key that -key says: the client IP, the address of the peer
// (forwarding headers are anyone's to forge, and no proxy is trusted here),
// or a header with the client IP for requests without it.
func (c Config) KeyFunc() httplimit.KeyFunc {
	byIP, err := httplimit.KeyByIP(httplimit.ClientIP{})
	if err != nil {
		panic(err) // the zero ClientIP is always valid
	}
	if h, ok := strings.CutPrefix(c.Key, "header:"); ok {
		return httplimit.KeyFirst(httplimit.KeyByHeader(http.CanonicalHeaderKey(h)), byIP)
	}
	return byIP
}

// LeakyMaxWait is the -max-wait to apply: the flag (default Period) for
// leaky_bucket, 0 for the other algorithms, which never hold a request.
func (c Config) LeakyMaxWait() time.Duration {
	if c.Algorithm != core.LeakyBucket {
		return 0
	}
	if c.MaxWait > 0 {
		return c.MaxWait
	}
	return c.Period
}

// FailFlag parses -fail into closed: "open" (the default) or "closed".
func FailFlag(closed *bool) func(string) error {
	return func(s string) error {
		if s != "open" && s != "closed" {
			return errors.New(`want "open" or "closed"`)
		}
		*closed = s == "closed"
		return nil
	}
}

// FailName is -fail's value for closed.
func FailName(closed bool) string {
	if closed {
		return "closed"
	}
	return "open"
}
