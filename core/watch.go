package core

import (
	"context"
	"net"
	"runtime"
	"sync"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A Limiter learns of new connections (a restart, a failover) through a
// dial hook on its client. go-redis cannot remove a hook, so each client
// gets one hook, the first time a Limiter is made on it, shared by every
// Limiter on it since: making and closing Limiters on a long-lived client
// costs the same each time and leaves nothing on it.
var watches sync.Map // weak pointer to a client -> *clientWatch

// clientWatch is the one hook of a client, and the Limiters it tells. It
// holds neither strongly: a client or a Limiter nobody uses is collected,
// and takes its entry with it.
type clientWatch struct {
	mu       sync.Mutex
	limiters map[*weak.Pointer[Limiter]]struct{}
}

// watchClient registers l with its client's watch, and returns what
// undoes that.
func watchClient(l *Limiter) (stop func()) {
	w := watchOf(l.rdb)
	if w == nil {
		return nop
	}
	ref := new(weak.Pointer[Limiter])
	*ref = weak.Make(l)
	w.mu.Lock()
	w.limiters[ref] = struct{}{}
	w.mu.Unlock()
	remove := func(ref *weak.Pointer[Limiter]) {
		w.mu.Lock()
		delete(w.limiters, ref)
		w.mu.Unlock()
	}
	cleanup := runtime.AddCleanup(l, remove, ref)
	return func() {
		cleanup.Stop()
		remove(ref)
	}
}

// watchOf returns rdb's watch, adding its hook the first time.
func watchOf(rdb redis.UniversalClient) *clientWatch {
	var key any
	switch c := rdb.(type) {
	case *redis.Client:
		key = weak.Make(c)
	case *redis.ClusterClient:
		key = weak.Make(c)
	case *redis.Ring:
		key = weak.Make(c)
	default:
		return nil
	}
	if w, ok := watches.Load(key); ok {
		return w.(*clientWatch)
	}
	w := &clientWatch{limiters: make(map[*weak.Pointer[Limiter]]struct{})}
	if prev, loaded := watches.LoadOrStore(key, w); loaded {
		return prev.(*clientWatch)
	}
	hook := dialHook{w.dialed, w.failed}
	drop := func(key any) { watches.Delete(key) }
	switch c := rdb.(type) {
	case *redis.Client:
		c.AddHook(hook)
		runtime.AddCleanup(c, drop, key)
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
		runtime.AddCleanup(c, drop, key)
	case *redis.Ring:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
		runtime.AddCleanup(c, drop, key)
	}
	return w
}

// dialed tells every live Limiter of the client about a new connection.
func (w *clientWatch) dialed() { w.each((*Limiter).reconnected) }

// failed tells every live Limiter of the client that a dial failed: a
// Redis that is not there, whose first load decisions need not wait for.
func (w *clientWatch) failed() { w.each(func(l *Limiter) { l.funcs.warmedUp() }) }

func (w *clientWatch) each(f func(*Limiter)) {
	w.mu.Lock()
	live := make([]*Limiter, 0, len(w.limiters))
	for ref := range w.limiters {
		if l := ref.Value(); l != nil {
			live = append(live, l)
		}
	}
	w.mu.Unlock()
	for _, l := range live {
		f(l)
	}
}

// dialHook calls dialed after every connection the client makes, failed
// after every dial that fails.
type dialHook struct{ dialed, failed func() }

func (d dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			d.dialed()
		} else {
			d.failed()
		}
		return c, err
	}
}

func (d dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
