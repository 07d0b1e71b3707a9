package exampleapp

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/httplimit"
)

// syncBuffer is the log of a test: the Limiter writes to it from its own
// goroutines (loading its function library) while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func setup(t *testing.T, args ...string) (*App, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	app, err := Setup(context.Background(), "test", args, env(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	return app, log
}

func TestRedisOptions(t *testing.T) {
	t.Run("url", func(t *testing.T) {
		app, log := setup(t, "-redis", "redis://u:secret@h.example:6380/2", "-timeout", "70ms")
		o := app.RedisOptions()
		if len(o.Addrs) != 1 || o.Addrs[0] != "h.example:6380" || o.Username != "u" || o.Password != "secret" || o.DB != 2 {
			t.Errorf("got Addrs %v, Username %q, Password %q, DB %d; want the URL's", o.Addrs, o.Username, o.Password, o.DB)
		}
		if o.IsClusterMode || app.Embedded {
			t.Errorf("IsClusterMode %v, Embedded %v: want neither", o.IsClusterMode, app.Embedded)
		}
		if o.ReadTimeout != 70*time.Millisecond || o.DialTimeout != 70*time.Millisecond || o.MaxRetries != -1 {
			t.Errorf("ReadTimeout %v, DialTimeout %v, MaxRetries %d; want -timeout, -timeout, -1", o.ReadTimeout, o.DialTimeout, o.MaxRetries)
		}
		rdb := redis.NewUniversalClient(o)
		defer func() { _ = rdb.Close() }()
		if _, ok := rdb.(*redis.Client); !ok {
			t.Errorf("client %T, want *redis.Client", rdb)
		}
		if strings.Contains(log.String(), "secret") {
			t.Errorf("the log shows the password:\n%s", log)
		}
	})
	t.Run("cluster with one seed", func(t *testing.T) {
		app, _ := setup(t, "-redis-cluster", "127.0.0.1:1")
		rdb := redis.NewUniversalClient(app.RedisOptions())
		defer func() { _ = rdb.Close() }()
		if _, ok := rdb.(*redis.ClusterClient); !ok {
			t.Errorf("client %T, want *redis.ClusterClient", rdb)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		app, log := setup(t)
		if !app.Embedded || !strings.Contains(log.String(), "embedded in-process miniredis") {
			t.Fatalf("Embedded %v; log:\n%s", app.Embedded, log)
		}
		o := app.RedisOptions()
		o.ContextTimeoutEnabled = true
		rdb := redis.NewUniversalClient(o)
		defer func() { _ = rdb.Close() }()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING the embedded miniredis: %v", err)
		}
		app.Close()
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			t.Errorf("the embedded miniredis still answers after Close")
		}
	})
}

// request is an httplimit.Request with a peer address and headers.
type request struct {
	remote string
	header map[string]string
}

func (r request) Context() context.Context { return context.Background() }
func (r request) RemoteAddr() string       { return r.remote }
func (r request) Header(name string) []string {
	if v, ok := r.header[name]; ok {
		return []string{v}
	}
	return nil
}
func (r request) Method() string { return "GET" }
func (r request) Route() string  { return "/" }

var _ httplimit.Request = request{}

func TestKeyFunc(t *testing.T) {
	peer := "192.0.2.7:4321"
	forged := map[string]string{"X-Forwarded-For": "203.0.113.1", "X-Real-Ip": "203.0.113.2"}
	ipKey, err := Config{Key: "ip"}.KeyFunc()(request{remote: peer})
	if err != nil || ipKey == "" {
		t.Fatalf("ip key: %q, %v", ipKey, err)
	}
	if k, _ := (Config{Key: "ip"}).KeyFunc()(request{remote: peer, header: forged}); k != ipKey {
		t.Errorf("forwarding headers changed the ip key: %q, want %q", k, ipKey)
	}
	byHeader := Config{Key: "header:x-api-key"}.KeyFunc()
	alice, err := byHeader(request{remote: peer, header: map[string]string{"X-Api-Key": "alice"}})
	if err != nil || alice == "" || alice == ipKey {
		t.Errorf("header key: %q, %v; want one apart from the ip key %q", alice, err, ipKey)
	}
	if k, err := byHeader(request{remote: peer}); err != nil || k != ipKey {
		t.Errorf("without the header: %q, %v; want the ip key %q", k, err, ipKey)
	}
}

// TestSetup checks that Setup wires a Policy, and a /metrics handler only
// with -metrics, and logs the concurrency limit.
func TestSetup(t *testing.T) {
	app, log := setup(t, "-concurrency", "2", "-concurrency-lease", "3s", "-metrics")
	if app.Policy == nil || app.Metrics == nil {
		t.Errorf("with -metrics: Policy %v, Metrics %v; want both", app.Policy, app.Metrics)
	}
	if !strings.Contains(log.String(), "concurrency=2") {
		t.Errorf("the log does not say the concurrency:\n%s", log)
	}
	if app, _ := setup(t); app.Policy == nil || app.Metrics != nil {
		t.Errorf("defaults: Policy %v, Metrics %v; want a Policy and no metrics", app.Policy, app.Metrics)
	}
}
