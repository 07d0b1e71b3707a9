package core

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// functions tracks whether the library is loaded on every node, so that
// decisions can FCALL it (see call).
type functions struct {
	on      atomic.Bool
	loading atomic.Bool
	next    atomic.Int64 // unix ns before which a load that failed is not tried again
}

// loadRetry is how long a Redis that refused the library (no FUNCTION
// command, or an ACL) is left alone before it is asked again.
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
		if err != nil {
			f.on.Store(false)
			f.next.Store(time.Now().Add(loadRetry).UnixNano())
			return
		}
		if !l.closed.Load() {
			f.on.Store(true)
		}
	}()
}

// lost notes a node without the library: scripts decide until it is back.
func (f *functions) lost(l *Limiter) {
	f.on.Store(false)
	f.next.Store(0)
	f.load(l)
}
