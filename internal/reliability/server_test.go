package reliability

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
)

// newLimiter is core.New for a test: quiet unless the options say where
// to log, and failing t on an error.
func newLimiter(t testing.TB, rdb redis.UniversalClient, opts ...core.Option) *core.Limiter {
	t.Helper()
	// The fallback off: these tests see Redis' faults as errors; the
	// degraded paths' own tests (degraded_test.go) keep the default.
	l, err := core.New(rdb, append([]core.Option{core.WithLogger(nil), core.WithLocalFallback(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// with returns l enforced by a.
func with(l core.Limit, a core.Algorithm) core.Limit {
	l.Algorithm = a
	return l
}

// patient is the timeout of Limiters in tests about exactness rather than
// latency, so that a 2-core CI machine busy with other packages' tests
// does not turn a slow answer into a failure.
const patient = time.Second

// eventually polls cond every few milliseconds until it holds, and fails
// the test if it does not within d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unique returns a string no other run shares, for keys on a shared Redis.
func unique(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return "reltest:" + name + ":" + hex.EncodeToString(b[:])
}

// counter is a go-redis hook that counts the commands a client sends, so a
// test can tell whether a call touched Redis at all. A new connection's
// handshake (HELLO, CLIENT SETINFO) is not counted: it is go-redis', not
// the Limiter's.
type counter struct {
	cmds      atomic.Int64
	evals     atomic.Int64 // EVAL (not EVALSHA): a script was (re)loaded
	decisions atomic.Int64 // FCALL, EVALSHA, EVAL: the calls that decide
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
			return next(ctx, cmd) // the connection's own handshake
		}
		c.cmds.Add(1)
		switch cmd.Name() {
		case "eval":
			c.evals.Add(1)
			c.decisions.Add(1)
		case "fcall", "evalsha":
			c.decisions.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			switch cmd.Name() {
			case "hello", "client", "auth", "select":
			default:
				c.cmds.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// logRecorder is a slog.Handler that keeps "LEVEL message" of each record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) records() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}

// isTimeout reports an error that means "Redis did not answer in time".
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		(errors.As(err, &ne) && ne.Timeout())
}
