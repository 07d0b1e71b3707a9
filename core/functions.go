package core

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// functions tracks whether the library is loaded on every node, so that
// decisions can FCALL it (see call).
type functions struct {
	on      atomic.Bool
	loading atomic.Bool
	next    atomic.Int64 // unix ns before which a load that failed is not tried again
	fails   atomic.Int32 // loads failed in a row for a reason that passes
}

// loadRetry is how long a Redis that refused the library (no FUNCTION
// command, or an ACL) is left alone before it is asked again. A load that
// failed for a passing reason (a node restarting, a failover, a timeout)
// is tried again after 1s, 2s, 4s ... up to loadRetry: scripts decide
// meanwhile, so a Cluster that loses the library on a restarted master
// has it back within seconds of settling, not a minute later.
const loadRetry = time.Minute

// load loads the library on every node in the background, unless a load is
// running or failed recently.
func (f *functions) load(l *Limiter) {
	if time.Now().UnixNano() < f.next.Load() || !f.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := l.eachNode(ctx, func(ctx context.Context, c redis.Cmdable) error {
			err := c.FunctionLoad(ctx, librarySource).Err()
			if err != nil && strings.Contains(err.Error(), "already exists") {
				return nil // loaded before, by this or another instance
			}
			return err
		})
		if err == nil {
			f.fails.Store(0)
			if !l.closed.Load() {
				f.on.Store(true)
			}
			return
		}
		f.on.Store(false)
		wait := loadRetry
		if passing(err) {
			wait = min(loadRetry, time.Second<<min(f.fails.Add(1)-1, 6))
			// Weakly: a Limiter dropped while its Redis is down must not
			// be kept alive by its own retries.
			wl := weak.Make(l)
			time.AfterFunc(wait, func() {
				if l := wl.Value(); l != nil && !l.closed.Load() {
					l.funcs.next.Store(0)
					l.funcs.load(l)
				}
			})
		}
		f.next.Store(time.Now().Add(wait).UnixNano())
	}()
}

// passing reports whether a failed load may succeed if tried again soon:
// anything but a reply of the server that refuses it (an unknown command,
// an ACL), since a node that is down, loading, failing over or slow to
// answer will not be for long.
func passing(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true // the network, a timeout
	}
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "BUSY", "MOVED", "ASK"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// lost notes a node without the library: scripts decide until it is back.
func (f *functions) lost(l *Limiter) {
	f.on.Store(false)
	f.next.Store(0)
	f.load(l)
}
