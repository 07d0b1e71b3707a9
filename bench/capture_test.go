package bench

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// Captures. The bench never rebuilds a script call of its own: it makes
// one real decision with an implementation, under a context marked with a
// recorder, and every bench client's hook (counter) records the script
// calls made under that context, exactly as go-redis sends them. What the
// go-redis contender replays and what redis-benchmark sends for the
// ceiling are such captures, so they stay what the implementation sends
// whatever it changes.

// captureKey marks a context whose script calls are recorded.
type captureKey struct{}

// recorder holds the script calls made under one capturing context.
type recorder struct {
	mu    sync.Mutex
	calls []scriptCall
}

// capturing counts the captures running; the hook looks at the context
// only while one is.
var capturing atomic.Int32

// record keeps cmd if ctx is capturing and cmd runs a script.
func record(ctx context.Context, cmd redis.Cmder, err error) {
	r, ok := ctx.Value(captureKey{}).(*recorder)
	if !ok {
		return
	}
	switch cmd.Name() {
	case "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro":
	default:
		return
	}
	c := scriptCall{args: slices.Clone(cmd.Args()), err: err}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// scriptCall is one script command as go-redis sent it: name, function
// name or SHA (or source), numkeys, keys..., args..., each argument the
// value go-redis was given (so its type is kept as well: the bytes on the
// wire follow from it).
type scriptCall struct {
	args []any
	err  error // what Redis answered, when it was an error
}

// name is the command, lower case ("fcall", "evalsha").
func (c scriptCall) name() string {
	if len(c.args) == 0 {
		return ""
	}
	return strings.ToLower(fmt.Sprint(c.args[0]))
}

// target is the function's name, or the script's SHA.
func (c scriptCall) target() string {
	if len(c.args) < 2 {
		return ""
	}
	return fmt.Sprint(c.args[1])
}

func (c scriptCall) numKeys() int {
	if len(c.args) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(fmt.Sprint(c.args[2]))
	return min(max(n, 0), len(c.args)-3)
}

// keys are the Redis keys the call names.
func (c scriptCall) keys() []string {
	n := c.numKeys()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(c.args[3+i])
	}
	return keys
}

// tail is the arguments after the keys.
func (c scriptCall) tail() []any { return c.args[3+c.numKeys():] }

// swap returns the call with from replaced by to in every string argument
// after the function or SHA: the same call on another key.
func (c scriptCall) swap(from, to string) scriptCall {
	args := slices.Clone(c.args)
	for i := 2; i < len(args); i++ {
		if s, ok := args[i].(string); ok {
			args[i] = strings.ReplaceAll(s, from, to)
		}
	}
	return scriptCall{args: args}
}

// strings is the call's arguments as text (for redis-benchmark and logs).
func (c scriptCall) strings() []string {
	out := make([]string, len(c.args))
	for i, a := range c.args {
		out[i] = respArg(a)
	}
	return out
}

func (c scriptCall) String() string { return strings.Join(c.strings(), " ") }

// resp is the call as go-redis writes it on the wire (RESP, an array of
// bulk strings).
func (c scriptCall) resp() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(c.args))
	for _, a := range c.args {
		s := respArg(a)
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(s), s)
	}
	return b.Bytes()
}

// respArg is how go-redis' writer (internal/proto) renders an argument.
func respArg(a any) string {
	switch v := a.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return strconv.FormatInt(int64(v), 10)
	case int8:
		return strconv.FormatInt(int64(v), 10)
	case int16:
		return strconv.FormatInt(int64(v), 10)
	case int32:
		return strconv.FormatInt(int64(v), 10)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint:
		return strconv.FormatUint(uint64(v), 10)
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint16:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 64)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10)
	}
	return fmt.Sprint(a)
}

// captureOne runs f under a capturing context and returns the last script
// call made under it that Redis did not refuse.
func captureOne(f func(ctx context.Context) error) (scriptCall, error) {
	capturing.Add(1)
	defer capturing.Add(-1)
	r := &recorder{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), captureKey{}, r), 5*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		return scriptCall{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i].err == nil {
			return r.calls[i], nil
		}
	}
	var names []string
	for _, c := range r.calls {
		names = append(names, fmt.Sprintf("%s (%v)", c.name(), c.err))
	}
	return scriptCall{}, fmt.Errorf("no script call captured (saw: %v)", names)
}

// captureWait bounds how long a capture waits for the final form.
const captureWait = 5 * time.Second

// captureSettled repeats f under captures until its call has its settled
// form: an FCALL when fcall is set, else anything but EVAL (a first call
// on a server without the script is an EVALSHA refused with NOSCRIPT, then
// an EVAL of the source; later ones are EVALSHA). It returns the last call
// captured, with an error if the form never came within captureWait.
func captureSettled(fcall bool, f func(ctx context.Context) error) (scriptCall, error) {
	deadline := time.Now().Add(captureWait)
	for {
		c, err := captureOne(f)
		if err != nil {
			return c, err
		}
		settled := c.name() == "fcall" || !fcall && c.name() != "eval"
		if settled {
			return c, nil
		}
		if time.Now().After(deadline) {
			if fcall {
				return c, fmt.Errorf("after %v the Limiter still sends %s, not FCALL, though Redis %s has functions: the library did not load", captureWait, strings.ToUpper(c.name()), redisVersion())
			}
			return c, fmt.Errorf("after %v the call is still %s", captureWait, strings.ToUpper(c.name()))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var (
	versionOnce sync.Once
	versionStr  = "unknown"
)

// redisVersion is the server's redis_version.
func redisVersion() string {
	versionOnce.Do(func() {
		rdb, err := infoClient()
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		text, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return
		}
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				versionStr = v
			}
		}
	})
	return versionStr
}

// serverHasFunctions reports a Redis of version 7 or later, where a
// Limiter's decisions are FCALLs of its library once it has loaded it.
func serverHasFunctions() bool {
	major, _, _ := strings.Cut(redisVersion(), ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 7
}

// formsSeen are the forms our Limiters were found deciding in (see
// newLimiter), for the table's header.
var (
	formsMu   sync.Mutex
	formsSeen = map[string]string{} // name -> function or SHA
)

func noteForm(c scriptCall) {
	formsMu.Lock()
	formsSeen[strings.ToUpper(c.name())] = c.target()
	formsMu.Unlock()
}

// probeLimit is what newLimiter's probe decisions ask: a token bucket far
// above any load.
var probeLimit = core.PerSecond(10_000_000)

// awaitForm makes probe decisions with l on a probe key of its own until
// they reach Redis in their settled form (FCALL on Redis 7), then deletes
// the key. It returns the probe's call.
func awaitForm(l *core.Limiter) (scriptCall, error) {
	key := fmt.Sprintf("%s:probe%d", runPrefix, nsSeq.Add(1))
	c, err := captureSettled(serverHasFunctions(), func(ctx context.Context) error {
		_, err := l.Allow(ctx, 1, probeLimit.For(key))
		return err
	})
	if derr := unlinkKeys(c.keys()...); err == nil && derr != nil {
		err = fmt.Errorf("deleting the probe's keys: %w", derr)
	}
	return c, err
}

// captureOurs returns the call one decision under lim makes, of a Limiter
// with opts (and the bench's timeout) on the capture client, once the
// Limiter decides in its settled form, and the placeholder key it was made
// for (swap it for another key). The call's keys are deleted.
func captureOurs(lim core.Limit, opts ...core.Option) (call scriptCall, key string, err error) {
	c, err := clientNamed("capture")
	if err != nil {
		return scriptCall{}, "", err
	}
	l, err := newLimiter(c.rdb, opts...)
	if err != nil {
		return scriptCall{}, "", err
	}
	defer func() {
		if cerr := l.Close(); err == nil {
			err = cerr
		}
	}()
	key = fmt.Sprintf("%s:capture%d", runPrefix, nsSeq.Add(1))
	call, err = captureSettled(serverHasFunctions(), func(ctx context.Context) error {
		_, err := l.Allow(ctx, 1, lim.For(key))
		return err
	})
	if derr := unlinkKeys(call.keys()...); err == nil && derr != nil {
		err = derr
	}
	return call, key, err
}

// TestOneCallScript checks that what go-redis alone sends (the goredis
// contender, replaying a capture) is, byte for byte and type for type, the
// call a fresh plain Limiter makes for one decision of the same key; and
// that a lone decision of a default (batched) Limiter makes that same
// call. On Redis 7 the call must be an FCALL.
func TestOneCallScript(t *testing.T) {
	needRedis(t)
	c := clientFor(t, goredis.client)
	for _, tr := range []traffic{allowed, denied} {
		t.Run(tr.String(), func(t *testing.T) {
			q := tr.quota()
			keys, pattern := keySet(1)
			defer func() { _ = unlinkMatching(pattern) }()
			d, closeD, err := goredis.make(c.rdb, q, keys)
			if err != nil {
				t.Fatal(err)
			}
			defer closeD()
			replay, err := captureOne(func(ctx context.Context) error {
				_, err := d(ctx, 0)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			lim := core.Limit{Rate: q.rate, Period: q.period}
			for _, o := range []struct {
				name string
				opts []core.Option
			}{{"plain", []core.Option{core.WithBatching(1)}}, {"default (batched)", nil}} {
				fresh, placeholder, err := captureOurs(lim, o.opts...)
				if err != nil {
					t.Fatal(err)
				}
				fresh = fresh.swap(placeholder, keys[0])
				if !reflect.DeepEqual(replay.args, fresh.args) || !bytes.Equal(replay.resp(), fresh.resp()) {
					t.Errorf("a %s Limiter sends\n\t%#v\ngo-redis alone sends\n\t%#v", o.name, fresh.args, replay.args)
				}
			}
			if want := "evalsha"; serverHasFunctions() {
				want = "fcall"
				if replay.name() != want {
					t.Errorf("on Redis %s the call is %s, want %s", redisVersion(), replay.name(), want)
				}
			} else if replay.name() != want {
				t.Errorf("on Redis %s the call is %s, want %s", redisVersion(), replay.name(), want)
			}
			t.Logf("%s", replay)
		})
	}
}
