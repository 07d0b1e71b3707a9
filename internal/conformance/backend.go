package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// Timeout bounds each decision in the suite: generous, so that a loaded
// machine (-race, parallel scenarios and packages) never turns a slow
// answer into a failure.
const Timeout = 5 * time.Second

// StopTimeout bounds each decision in the scenarios that stop Redis, which
// check that the answer comes within it.
const StopTimeout = time.Second

func timeout(stops bool) time.Duration {
	if stops {
		return StopTimeout
	}
	return Timeout
}

// backend is one scenario's Redis: its Limiter (with a prefix of its own),
// how to stop Redis, and how to list the keys the scenario wrote.
type backend struct {
	limiter *core.Limiter
	prefix  string
	rdb     redis.UniversalClient
	stop    func()
	exact   bool // the Redis clock stands still (miniredis)
}

func uniquePrefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "redlimit-conformance:" + hex.EncodeToString(b[:]) + ":" + name
}

// newMini is a miniredis of the scenario's own, its clock standing still
// at redistest.Epoch; stop closes it.
func newMini(t *testing.T, stops bool) *backend {
	mr, rdb := redistest.Mini(t)
	prefix := uniquePrefix(t)
	return &backend{
		limiter: newLimiter(t, rdb, prefix, stops),
		prefix:  prefix,
		rdb:     rdb,
		stop:    mr.Close,
		exact:   true,
	}
}

// newLimiter is the scenario's Limiter: quiet, under its own prefix.
func newLimiter(t *testing.T, rdb redis.UniversalClient, prefix string, stops bool) *core.Limiter {
	t.Helper()
	l, err := core.New(rdb, core.WithPrefix(prefix), core.WithTimeout(timeout(stops)), core.WithLogger(nil),
		core.WithLocalFallback(0, 0)) // the scenarios check each adapter's fail policy
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// realRedis is the client for REDIS_URL, shared by the scenarios.
func realRedis(t *testing.T) *redis.Client {
	return redistest.Real(t)
}

// newReal uses the real Redis under a prefix unique to the scenario, and
// deletes its keys afterwards. A scenario that stops Redis reaches it
// through a TCP proxy of its own, and stopping closes the proxy: the
// effect on the client is that of Redis going away.
func newReal(t *testing.T, rdb *redis.Client, stops bool) *backend {
	prefix := uniquePrefix(t)
	b := &backend{prefix: prefix, rdb: rdb, stop: func() { t.Fatal("this scenario was not set up to stop Redis") }}
	client := rdb
	if stops {
		p := startProxy(t, rdb.Options().Addr)
		opt := *rdb.Options()
		opt.Addr = p.addr()
		client = redis.NewClient(&opt)
		t.Cleanup(func() { _ = client.Close() })
		b.stop = p.close
	}
	b.limiter = newLimiter(t, client, prefix, stops)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := rdb.Keys(ctx, prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("cleaning up keys %s:*: %v", prefix, err)
		}
	})
	return b
}

// unescape undoes the escaping core applies to the caller's part of a key.
var unescape = strings.NewReplacer("%7B", "{", "%7D", "}", "%23", "#", "%25", "%")

// keys lists the keys the scenario wrote (see StoredKeys).
func (b *backend) keys(t *testing.T) []string {
	t.Helper()
	return StoredKeys(t, b.rdb, b.prefix)
}

// StoredKeys lists the keys written under a Limiter's prefix as
// "<policy name>:<key>", without the prefix and algorithm suffix
// ("<prefix>:{<name>:<key>}:<alg>") and with the escaping of braces
// undone (core's, and httplimit's of the keys it reads from a request); a state of several Redis keys (the sliding window's) is listed
// once. The gRPC module's tests read their keys with it too.
func StoredKeys(t testing.TB, rdb redis.Cmdable, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	raw, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatalf("listing keys: %v", err)
	}
	out := []string{}
	for _, k := range raw {
		k = strings.TrimPrefix(k, prefix+":{")
		if i := strings.LastIndex(k, "}:"); i >= 0 {
			k = k[:i]
		}
		if i := strings.Index(k, "}{"); i >= 0 {
			k = k[i+2:] // a key with a hash tag of its own: "<tag>}{<key>"
		}
		// Twice: httplimit escapes the braces of the keys it reads from a
		// request (a route pattern, a header), and core escapes again.
		out = append(out, unescape.Replace(unescape.Replace(k)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// proxy forwards TCP connections to a Redis until it is closed; then it
// refuses new ones and cuts the open ones, as a stopped Redis would.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &proxy{ln: ln}
	t.Cleanup(p.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil || !p.track(c, u) {
				_ = c.Close()
				if u != nil {
					_ = u.Close()
				}
				continue
			}
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

func (p *proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
