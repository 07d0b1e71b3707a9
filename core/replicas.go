package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaAcks is what WithReplicaAcks asks: n replicas acknowledge each
// call's writes within timeout. n 0: no acknowledgement is asked.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// check refuses acks the Limiter's timeout would cut short: the WAIT
// would never see its own timeout, and every call would fail at the
// Limiter's instead, as a timeout that says nothing of the replicas.
func (a replicaAcks) check(timeout time.Duration) error {
	if a.n > 0 && timeout > 0 && a.timeout >= timeout {
		return fmt.Errorf("core: WithReplicaAcks: timeout %v must be below the Limiter's timeout %v (WithTimeout)", a.timeout, timeout)
	}
	return nil
}

// errNotReplicated is a call whose writes fewer replicas than asked
// acknowledged within the timeout. It is a Redis fault (see redisFault):
// the writes are on the master, and a failover now may lose them.
var errNotReplicated = errors.New("the call's writes were not acknowledged by enough replicas")

// pipeliner is a client that sends several commands on one connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// nodeOf is the client of the node that holds key: WAIT counts the
// replicas that hold the writes of its own connection, so it must follow
// the script on the connection that ran it. A Cluster (or Ring) client
// would send a keyless WAIT to any node.
func (l *Limiter) nodeOf(ctx context.Context, key string) (pipeliner, error) {
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Ring:
		return c.GetShardClientForKey(key)
	}
	return l.rdb, nil
}

// runAcked is run under WithReplicaAcks: the call and a WAIT in one
// pipeline, one round trip on one connection.
func (l *Limiter) runAcked(ctx context.Context, fn string, script *evalScript, keys []string, args []any, once bool) (any, error) {
	node, err := l.nodeOf(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	if l.funcs.on.Load() {
		v, err := l.acked(ctx, node, once, "fcall", fn, keys, args)
		if err == nil || !isNoFunction(err) {
			return v, err
		}
		l.funcs.lost(l)
	}
	v, err := l.acked(ctx, node, once, "evalsha", script.Hash(), keys, args)
	var re redis.Error
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT") {
		return l.acked(ctx, node, once, "eval", script.src, keys, args)
	}
	return v, err
}

// acked sends the command name (fcall, evalsha or eval) of target, then
// WAIT, and returns the command's reply once the replicas asked for hold
// its writes. once: neither is retried (see call).
func (l *Limiter) acked(ctx context.Context, node pipeliner, once bool, name, target string, keys []string, args []any) (any, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, target, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	var cmd redis.Cmder = redis.NewCmd(ctx, append(cmdArgs, args...)...)
	if once {
		cmd = noRetry{cmd.(*redis.Cmd)}
	}
	wait := redis.NewIntCmd(ctx, "wait", l.acks.n, l.acks.timeout.Milliseconds())
	pipe := node.Pipeline()
	_ = pipe.Process(ctx, cmd)
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	v, err := replyOf(cmd)
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && (strings.HasPrefix(re.Error(), "MOVED ") || strings.HasPrefix(re.Error(), "ASK ")) {
			// The slot is moving: a fault that passes, as TRYAGAIN is (the
			// breaker has the Cluster client reload its slot map).
			return nil, fmt.Errorf("the slot moved (%s)", re.Error())
		}
		return nil, err
	}
	acks, err := wait.Result()
	if err != nil {
		return nil, err
	}
	if acks < int64(l.acks.n) {
		return nil, fmt.Errorf("%w: %d of %d within %v", errNotReplicated, acks, l.acks.n, l.acks.timeout)
	}
	return v, nil
}

// replyOf is the reply of a *redis.Cmd, bare or wrapped in noRetry.
func replyOf(c redis.Cmder) (any, error) {
	if n, ok := c.(noRetry); ok {
		return n.Result()
	}
	return c.(*redis.Cmd).Result()
}
