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
	refused atomic.Bool  // the server refused FUNCTION, and it was logged

	// warm is closed when the first load ends, whatever its outcome;
	// warmBy is when decisions stop waiting for it (see ready).
	warm   chan struct{}
	warmBy time.Time
	warmed atomic.Bool
}

// warmWait is the longest a new Limiter's decisions wait for its first
// load (or its timeout, when longer): as long as Ping may take.
const warmWait = time.Second

// prepare makes the first load, which New starts next, the one decisions
// wait for. It runs before the Limiter is registered with its client's
// dial hook, which may end the wait from then on.
func (f *functions) prepare(timeout time.Duration) {
	f.warm = make(chan struct{})
	f.warmBy = time.Now().Add(max(timeout, warmWait))
}

// ready waits, while the first load runs, for it to end, within ctx and
// until warmBy at most: the first decisions of a new Limiter do not spend
// their timeout on dialling Redis and loading the library, and meet a
// server that has it. A decision then has its whole timeout for its call.
// A dial that fails ends the wait too (see clientWatch.failed): a Redis
// that is not there fails the first decisions as fast as the later ones.
func (f *functions) ready(ctx context.Context) {
	if f.warmed.Load() {
		return
	}
	wait := time.Until(f.warmBy)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.warm:
	case <-t.C:
	case <-ctx.Done():
	}
}

// warmedUp ends the wait of ready, once.
func (f *functions) warmedUp() {
	if f.warm != nil && f.warmed.CompareAndSwap(false, true) {
		close(f.warm)
	}
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
		defer f.warmedUp()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := l.eachNode(ctx, loadLibrary)
		if err == nil {
			f.fails.Store(0)
			f.refused.Store(false)
			if !l.closed.Load() {
				f.on.Store(true)
			}
			return
		}
		f.on.Store(false)
		wait := loadRetry
		if !passing(err) && !f.refused.Swap(true) {
			if log := l.log(); log != nil {
				log.Info("redlimit: redis refused FUNCTION; decisions run as scripts (EVALSHA) instead", "err", err)
			}
		}
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

// loadLibrary loads the library on a node that has it not. It asks
// first, so that the FUNCTION LOAD of every new Limiter after the first
// does not fail ("already exists") where monitoring counts failed calls;
// the name carries a hash of the code, so a node holding this name holds
// this code. Two instances that load at once both ask, and one LOAD fails:
// the library is there, which is all that was wanted.
func loadLibrary(ctx context.Context, c redis.Cmdable) error {
	// A generic reply, not FunctionList's: go-redis' typed one refuses
	// fields it does not know, which another server (Valkey) may add.
	// (Every client eachNode passes can Process.)
	if p, ok := c.(interface {
		Process(context.Context, redis.Cmder) error
	}); ok {
		list := redis.NewSliceCmd(ctx, "function", "list", "libraryname", libraryName)
		_ = p.Process(ctx, list)
		libs, err := list.Result()
		if err != nil {
			return err
		}
		if len(libs) > 0 {
			return nil
		}
	}
	err := c.FunctionLoad(ctx, librarySource).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil // loaded in between, by another instance
	}
	return err
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
