package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// libraryOne is the library's function of one request.
var libraryOne = libraryName + "_1"

// call runs the plan's decision in Redis: an FCALL of the library when it
// is loaded, else the plan's script (EVALSHA, EVAL once after a SCRIPT
// FLUSH). A server that lost the library (a restart, FUNCTION FLUSH) is
// answered by the script at once, while the library is loaded again in
// the background. The caller has bounded ctx (see bound).
//
// once sends a call go-redis must not retry: a refund's. A decision that
// takes, retried after its reply was lost, counts twice at most (the
// strict side); a refund retried would give back twice. Unretried, a lost
// reply is an error, and the units may or may not have come back: the
// strict side again.
func (l *Limiter) call(ctx context.Context, pl *plan, keys []string, args []any, single, once bool) (any, error) {
	fn, script := libraryName, pl.script
	if single {
		fn, script = libraryOne, pl.single
	}
	if err := caller(ctx).Err(); err != nil {
		// Gave up before its call left (go-redis, seeing the shared
		// deadline's Done alone, would send it still): no units taken
		// for a request that will not run (TestBoundCallerLeaves).
		return nil, unsent{l.wrap(ctx, err)}
	}
	if !l.detach {
		v, err := l.run(ctx, fn, script, keys, args, once)
		return v, l.wrap(ctx, notWritten(err, pl, keys))
	}
	// The call may outlive the caller, whose KEYS buffer is recycled.
	keys = append([]string(nil), keys...)
	v, err := l.detached(ctx, func(ctx context.Context) (any, error) {
		return l.run(ctx, fn, script, keys, args, once)
	})
	return v, notWritten(err, pl, keys)
}

// notWritten names the keys of a fixed window's call whose INCRBY found a
// value it cannot add to (not an integer, one it would overflow, a key of
// another type): its take adds before it reads (see fw.take), so Redis'
// error, not the script, reports such a value, and this one names the
// keys as the scripts' own errors do.
func notWritten(err error, pl *plan, keys []string) error {
	if err == nil || len(pl.layers) != 1 || !pl.layers[0].row.tagged {
		return err
	}
	if msg := err.Error(); !strings.Contains(msg, "not an integer") && !strings.Contains(msg, "would overflow") && !strings.Contains(msg, "WRONGTYPE") {
		return err
	}
	if len(keys) > 3 {
		keys = append(keys[:3:3], "...")
	}
	return fmt.Errorf("redlimit: %s holds a value redlimit did not write: %w", strings.Join(keys, " or "), err)
}

// run is call's one attempt: the function, or the script when the server
// has not the library. (A method, not a closure, so that the common call
// allocates nothing for it.)
func (l *Limiter) run(ctx context.Context, fn string, script *evalScript, keys []string, args []any, once bool) (any, error) {
	if l.acks.n > 0 {
		return l.runAcked(ctx, fn, script, keys, args, once)
	}
	if l.funcs.on.Load() {
		v, err := l.fcall(ctx, fn, keys, args, once)
		if err == nil || !isNoFunction(err) {
			return v, err
		}
		l.funcs.lost(l)
	}
	if once {
		return l.evalOnce(ctx, script, keys, args)
	}
	return script.Run(ctx, l.rdb, keys, args...).Result()
}

// noRetry is a command go-redis sends at most once (see call's once).
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

func (l *Limiter) fcall(ctx context.Context, fn string, keys []string, args []any, once bool) (any, error) {
	if !once {
		return l.rdb.FCall(ctx, fn, keys, args...).Result()
	}
	return l.processOnce(ctx, "fcall", fn, keys, args)
}

// evalOnce is Script.Run, each command sent at most once: EVALSHA, then
// EVAL when Redis has not the script (NOSCRIPT: nothing ran).
func (l *Limiter) evalOnce(ctx context.Context, s *evalScript, keys []string, args []any) (any, error) {
	v, err := l.processOnce(ctx, "evalsha", s.Hash(), keys, args)
	var re redis.Error
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT") {
		return l.processOnce(ctx, "eval", s.src, keys, args)
	}
	return v, err
}

func (l *Limiter) processOnce(ctx context.Context, name, target string, keys []string, args []any) (any, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, target, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmd := redis.NewCmd(ctx, append(cmdArgs, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the slot a Cluster client routes by
	}
	_ = l.rdb.Process(ctx, noRetry{cmd})
	return cmd.Result()
}

func isNoFunction(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "ERR Function not found")
}

// do runs a rare command (DEL, a Ping) within the timeout.
func (l *Limiter) do(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if !l.detach {
		v, err := f(ctx)
		return v, l.wrap(ctx, err)
	}
	return l.detached(ctx, f)
}

func nop() {}

// bound applies the Limiter's timeout, unless the caller's own deadline
// comes first (then a timer would be wasted). The timeout starts once the
// first load of a new Limiter has ended (see functions.ready). Up to
// maxSharedTimeout, the deadline is shared with the calls that start in
// the same ms (see deadlines), whether the caller's context can be
// cancelled (an HTTP or gRPC request's) or not (context.Background, as a
// batch's). A caller's deadline up to 1 ms after the timeout's is kept
// as it is: a shared one may be that much later, and no context may end
// after its parent.
func (l *Limiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	l.funcs.ready(ctx)
	if l.timeout <= 0 {
		return ctx, nop
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout+time.Millisecond {
		return ctx, nop
	}
	if l.timeout <= maxSharedTimeout {
		return l.deadlines.bound(ctx, l.timeout), nop
	}
	return context.WithTimeout(ctx, l.timeout)
}

// maxSharedTimeout bounds the timeouts whose deadlines are shared: a
// shared deadline is never cancelled early (calls still hold it), so it
// lives its whole timeout, one per ms: a second's are about 400 KB, an
// hour's would be gigabytes (TestSharedDeadlines).
const maxSharedTimeout = time.Second

// deadlines hands out the timeout's deadlines rounded up to a whole ms,
// one context for all the calls that start within a ms: never shorter
// than the timeout, at most 1 ms longer (TestSharedDeadlines). A context
// and timer per call were 370 of the 880 bytes a decision allocated.
type deadlines struct {
	cur atomic.Pointer[sharedDeadline]
}

type sharedDeadline struct {
	end    time.Time // its deadline, a whole ms, with the monotonic clock
	ctx    context.Context
	cancel context.CancelFunc // never called: calls share ctx until its timer ends it
}

// bound is parent, whose deadline (if any) is later, with the deadline
// now + timeout rounded up to a ms. (The shared one is compared on the
// monotonic clock, which a wall-clock step does not move: a deadline made
// before a step back is not taken for a later one.)
func (d *deadlines) bound(parent context.Context, timeout time.Duration) context.Context {
	want := time.Now().Add(timeout)
	s := d.cur.Load()
	if s != nil {
		if gap := s.end.Sub(want); gap < 0 || gap >= time.Millisecond {
			s = nil
		}
	}
	if s == nil {
		end := want
		if rem := end.UnixNano() % int64(time.Millisecond); rem != 0 {
			end = end.Add(time.Millisecond - time.Duration(rem))
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		s = &sharedDeadline{end: end, ctx: ctx, cancel: cancel}
		d.cur.Store(s)
	}
	if parent == context.Background() {
		return s.ctx
	}
	return &boundCtx{Context: parent, shared: s.ctx}
}

// boundCtx is the caller's context (its values) with a shared deadline.
// Its Done and Err are the shared deadline's alone. So go-redis does not
// see a caller give up once its call has left: its read ends with the
// reply or the deadline (at most the Limiter's timeout plus 1 ms), as it
// would anyway (a read watches the socket's deadline, not Done), and its
// wait for a pooled connection, under a pool exhausted, also runs to the
// deadline. Ours watch the caller too: a decision queued for a batch
// leaves at once, one not yet sent is not sent, and its error is the
// caller's (see caller and ended; TestBoundCallerLeaves).
type boundCtx struct {
	context.Context
	shared context.Context
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.shared.Deadline() }
func (c *boundCtx) Done() <-chan struct{}       { return c.shared.Done() }
func (c *boundCtx) Err() error                  { return c.shared.Err() }

// caller is the caller's own context under a bound one, else ctx (a
// select on both then has one channel twice).
func caller(ctx context.Context) context.Context {
	if c, ok := ctx.(*boundCtx); ok {
		return c.Context
	}
	return ctx
}

// ended is why a bound context ended: the caller's giving up first (so
// that it matches the caller's own ctx.Err(), as Limiter's errors
// promise), else its deadline.
func ended(ctx context.Context) error {
	if err := caller(ctx).Err(); err != nil {
		return err
	}
	return ctx.Err()
}

// Value asks the shared context first: it holds no value of the caller's,
// only the one by which a context derived from this one (context.WithCancel)
// finds the shared context's cancellation and joins it, rather than
// watching Done from a goroutine of its own.
func (c *boundCtx) Value(key any) any {
	if v := c.shared.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

type reply struct {
	v   any
	err error
}

// detached waits for f on its own goroutine, for clients that would not
// stop at ctx's deadline themselves.
func (l *Limiter) detached(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	ch := make(chan reply, 1)
	go func() {
		v, err := f(ctx)
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, l.wrap(ctx, r.err)
	case <-ctx.Done():
	case <-caller(ctx).Done():
	}
	return nil, l.wrap(ctx, ended(ctx))
}
