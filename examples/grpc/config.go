package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// config is the parsed command line and environment: the flags of the
// example contract (examples/README.md) that apply to gRPC.
type config struct {
	addr         string   // listen address; default ":50051"
	redisURL     string   // "" for none
	redisCluster []string // seed addresses; nil for none
	algorithm    core.Algorithm
	limit        int           // calls per period; default 10
	period       time.Duration // default 1s
	burst        int           // 0: = limit
	key          string        // "ip" or "metadata:<name>"; default "ip"
	failClosed   bool
	timeout      time.Duration // the most one decision may take; default 100ms
}

// option is one row of the contract's table: a flag and its env var.
type option struct{ flag, env, usage string }

var options = []option{
	{"addr", "ADDR", "listen address"},
	{"redis", "REDIS_URL", "Redis URL, e.g. redis://127.0.0.1:6379/0 (default: an embedded miniredis)"},
	{"redis-cluster", "REDIS_CLUSTER_ADDRS", "comma-separated Redis Cluster seed addresses"},
	{"algorithm", "ALGORITHM", "token_bucket, sliding_window, sliding_window_counter, fixed_window or leaky_bucket"},
	{"limit", "LIMIT", "calls allowed per period"},
	{"period", "PERIOD", "period of the limit (Go duration)"},
	{"burst", "BURST", "capacity of token_bucket, queue length of leaky_bucket (default: = limit)"},
	{"key", "KEY", "ip, or metadata:<name> (e.g. metadata:x-api-key; calls without it are keyed by IP)"},
	{"fail", "FAIL", "open or closed: when Redis cannot answer within the timeout, open lets this instance decide with its share of the limit (bounded, never unlimited), closed answers Unavailable"},
	{"timeout", "TIMEOUT", "the most one decision may wait for Redis before -fail applies"},
}

// parseConfig parses args (without the program name) and the environment
// that getenv reads: each flag may come from its env var, and a flag on
// the command line wins. An invalid value is an error that names the
// flag. -h prints the usage to stdout and returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	cfg := config{addr: ":50051", limit: 10, period: time.Second, key: "ip", timeout: 100 * time.Millisecond}
	var cluster string
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	usage := map[string]string{}
	for _, o := range options {
		usage[o.flag] = o.usage + " [$" + o.env + "]"
	}
	fs.StringVar(&cfg.addr, "addr", cfg.addr, usage["addr"])
	fs.StringVar(&cfg.redisURL, "redis", "", usage["redis"])
	fs.StringVar(&cluster, "redis-cluster", "", usage["redis-cluster"])
	// The library's types parse their own text: what a flag accepts is what
	// a config file would.
	fs.TextVar(&cfg.algorithm, "algorithm", core.TokenBucket, usage["algorithm"])
	fs.IntVar(&cfg.limit, "limit", cfg.limit, usage["limit"])
	fs.DurationVar(&cfg.period, "period", cfg.period, usage["period"])
	fs.IntVar(&cfg.burst, "burst", 0, usage["burst"])
	fs.StringVar(&cfg.key, "key", cfg.key, usage["key"])
	fs.Func("fail", usage["fail"], func(s string) error {
		if s != "open" && s != "closed" {
			return errors.New(`want "open" or "closed"`)
		}
		cfg.failClosed = s == "closed"
		return nil
	})
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, usage["timeout"])

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			_, _ = fmt.Fprintln(stdout, "Usage of grpc (each flag may also come from the env var in brackets; the flag wins):")
			fs.PrintDefaults()
		}
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q (all settings are flags, see -h)", fs.Arg(0))
	}
	// The environment fills in what the command line did not set.
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	envOf := map[string]string{}
	for _, o := range options {
		envOf[o.flag] = o.env
		if v := getenv(o.env); v != "" && !onCommandLine[o.flag] {
			if err := fs.Set(o.flag, v); err != nil {
				return config{}, fmt.Errorf("invalid value %q for $%s (flag -%s): %w", v, o.env, o.flag, err)
			}
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
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return config{}, fmt.Errorf("invalid %s: %q is not host:port", where("redis-cluster"), a)
			}
			cfg.redisCluster = append(cfg.redisCluster, a)
		}
		if len(cfg.redisCluster) == 0 {
			return config{}, fmt.Errorf("invalid %s: no address in %q", where("redis-cluster"), cluster)
		}
	}
	if cfg.redisURL != "" && cfg.redisCluster != nil {
		// A flag on the command line beats the other one's env var.
		switch url, cl := onCommandLine["redis"], onCommandLine["redis-cluster"]; {
		case url && !cl:
			cfg.redisCluster = nil
		case cl && !url:
			cfg.redisURL = ""
		default:
			return config{}, fmt.Errorf("%s and %s are exclusive: give one", where("redis"), where("redis-cluster"))
		}
	}
	if cfg.redisURL != "" {
		if _, err := redis.ParseURL(cfg.redisURL); err != nil {
			return config{}, fmt.Errorf("invalid %s: %w", where("redis"), err)
		}
	}
	switch {
	case cfg.limit < 1:
		return config{}, fmt.Errorf("invalid %s: must be >= 1, got %d", where("limit"), cfg.limit)
	case cfg.period <= 0:
		return config{}, fmt.Errorf("invalid %s: must be > 0, got %v", where("period"), cfg.period)
	case set["burst"] && cfg.burst < 1:
		return config{}, fmt.Errorf("invalid %s: must be >= 1, got %d", where("burst"), cfg.burst)
	case cfg.timeout <= 0:
		return config{}, fmt.Errorf("invalid %s: must be > 0, got %v", where("timeout"), cfg.timeout)
	}
	if cfg.key != "ip" {
		name, ok := strings.CutPrefix(cfg.key, "metadata:")
		if !ok || !validMetadataName(name) {
			return config{}, fmt.Errorf("invalid %s %q: want ip or metadata:<name>, e.g. metadata:x-api-key", where("key"), cfg.key)
		}
	}
	if err := cfg.coreLimit().Validate(); err != nil {
		return config{}, fmt.Errorf("invalid -limit, -period or -burst: %w", err)
	}
	return cfg, nil
}

// validMetadataName reports a name gRPC accepts for metadata of text
// values: digits, letters, '-', '_' and '.', not starting with ':' (a
// pseudo-header) nor ending in "-bin" (binary values).
func validMetadataName(s string) bool {
	if s == "" || strings.HasSuffix(strings.ToLower(s), "-bin") {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// coreLimit is the Limit that -algorithm, -limit, -period and -burst say.
func (c config) coreLimit() core.Limit {
	l := core.Limit{Algorithm: c.algorithm, Rate: c.limit, Period: c.period}
	if c.algorithm == core.TokenBucket || c.algorithm == core.LeakyBucket {
		l.Burst = c.burst
	}
	return l
}

// poolSize bounds the connections to each Redis node; they are opened as
// concurrency needs them, beyond warmConns, which go-redis dials at start
// in the background: the first burst after a start then finds them open
// rather than spending its timeout dialling (the local fallback would
// decide what it could not).
const poolSize, warmConns = 128, 16

// redisOptions are the go-redis options for -redis (its URL's address,
// credentials, database and TLS), -redis-cluster (a ClusterClient, even
// for one seed), or the embedded Redis at embedded. Dials, reads and
// writes take at most -timeout, and nothing is retried within a call
// (MaxRetries -1, DialerRetries 1): a retried script could count a call
// twice, a refused connection costs next to nothing, and the fail policy
// is there for failures. With ContextTimeoutEnabled go-redis stops at the
// Limiter's deadline on the socket itself.
func (c config) redisOptions(embedded string) *redis.UniversalOptions {
	o := &redis.UniversalOptions{
		DialTimeout:           c.timeout,
		ReadTimeout:           c.timeout,
		WriteTimeout:          c.timeout,
		PoolTimeout:           c.timeout,
		PoolSize:              poolSize,
		MinIdleConns:          warmConns,
		DialerRetries:         1,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	}
	switch {
	case c.redisURL != "":
		u, _ := redis.ParseURL(c.redisURL) // parseConfig checked it
		o.Addrs = []string{u.Addr}
		o.Username, o.Password, o.DB = u.Username, u.Password, u.DB
		o.TLSConfig, o.Protocol, o.ClientName = u.TLSConfig, u.Protocol, u.ClientName
	case c.redisCluster != nil:
		o.Addrs = c.redisCluster
		// redis.NewUniversalClient makes a single-node client for one
		// address, unless told it is a Cluster.
		o.IsClusterMode = true
	default:
		o.Addrs = []string{embedded}
	}
	return o
}
