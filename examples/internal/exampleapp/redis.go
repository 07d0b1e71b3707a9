package exampleapp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// newRedis connects to what the config names: -redis, -redis-cluster, or an
// embedded miniredis. Every client honours context deadlines on the socket
// (ContextTimeoutEnabled) and has timeouts no longer than -timeout, so a dead
// or slow Redis costs a request at most the timeout. Nothing is retried
// within a request (MaxRetries -1, DialerRetries 1): a refused connection
// costs next to nothing, a retried script could count a request twice, and
// the fail policy is there for failures. The pool is larger than go-redis'
// default (10 per CPU), so that a burst of concurrent requests waits for
// Redis rather than for a connection, which would fail them open. close
// releases the client (and stops the embedded Redis).
func newRedis(cfg Config, log *slog.Logger) (rdb redis.UniversalClient, where string, close func(), err error) {
	quietRedis.Do(func() { redis.SetLogger(redisLogger{log}) })
	t := cfg.Timeout
	switch {
	case cfg.RedisURL != "":
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, "", nil, fmt.Errorf("invalid -redis: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = t, t, t, t
		if opt.DialerRetries == 0 {
			opt.DialerRetries = 1
		}
		if opt.MaxRetries == 0 {
			opt.MaxRetries = -1
		}
		if opt.PoolSize == 0 {
			opt.PoolSize = poolSize
		}
		c := redis.NewClient(opt)
		log.Info("using redis", "addr", opt.Addr, "db", opt.DB)
		return c, opt.Addr, func() { _ = c.Close() }, nil
	case cfg.RedisCluster != nil:
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 cfg.RedisCluster,
			ContextTimeoutEnabled: true,
			DialTimeout:           t,
			ReadTimeout:           t,
			WriteTimeout:          t,
			PoolTimeout:           t,
			PoolSize:              poolSize,
			MaxRetries:            -1,
			NewClient: func(o *redis.Options) *redis.Client {
				o.DialerRetries = 1
				return redis.NewClient(o)
			},
		})
		where := strings.Join(cfg.RedisCluster, ",")
		log.Info("using redis cluster", "seeds", where)
		return c, where, func() { _ = c.Close() }, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, fmt.Errorf("start the embedded miniredis: %w", err)
	}
	c := redis.NewClient(&redis.Options{
		Addr:                  mr.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           t,
		ReadTimeout:           t,
		WriteTimeout:          t,
		PoolTimeout:           t,
		PoolSize:              poolSize,
		DialerRetries:         1,
		MaxRetries:            -1,
	})
	log.Info("no -redis or -redis-cluster given: using an embedded in-process miniredis; limits are not shared with other processes and are lost on exit",
		"addr", mr.Addr())
	return c, mr.Addr(), func() { _ = c.Close(); mr.Close() }, nil
}

// poolSize bounds the connections to each Redis node; they are opened as
// concurrency needs them.
const poolSize = 128

// quietRedis routes go-redis' own log lines (one per failed dial) to our log
// at debug level, hidden by default: the Limiter logs failures once per
// change of state.
var quietRedis sync.Once

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// ping checks Redis once at start-up, so a wrong address shows in the log
// at once rather than on the first request. The server starts either way.
func ping(ctx context.Context, log *slog.Logger, rdb redis.UniversalClient, where string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Warn("redis does not answer at start-up; the fail policy applies until it does", "redis", where, "err", err)
	}
}
