package core

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

// failLoads fails the first n FUNCTION LOADs as a node that is down
// would, and passes the rest on.
type failLoads struct{ n atomic.Int32 }

func (h *failLoads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failLoads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "function" && h.n.Add(-1) >= 0 {
			err := errors.New("dial tcp 127.0.0.1:7001: connect: connection refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failLoads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFunctionsLoadRetriedAfterAPassingFailure backs loadRetry's "a load
// that failed for a passing reason is tried again after 1s, 2s, 4s ...":
// two loads that fail as a restarting node's would are followed by a
// third, 1s and 2s later, that loads the library, with no request and no
// new connection to prompt it. (Before, a failed load was not tried again
// for a minute, and a Cluster whose master came back empty decided by
// script until then: TestClusterMasterRestartedEmpty failed 1 run in 11.)
func TestFunctionsLoadRetriedAfterAPassingFailure(t *testing.T) {
	rdb := redistest.Real(t)
	h := &failLoads{}
	h.n.Store(2)
	rdb.AddHook(h)
	l := opsNew(t, rdb)
	start := time.Now()
	for !l.funcs.on.Load() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the library is not loaded %v after two failed loads; want it within about 3s", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("loaded %v after New, before the retries' 1s and 2s", took)
	}
	if h.n.Load() > -1 {
		t.Errorf("%d FUNCTION LOADs, want 3", 2-h.n.Load())
	}
}

// TestFunctionsRefusedWaitAMinute: a server that refuses FUNCTION (here
// miniredis: an unknown command) is not asked again within loadRetry,
// and scripts decide.
func TestFunctionsRefusedWaitAMinute(t *testing.T) {
	_, rdb := redistest.Mini(t)
	l := opsNew(t, rdb)
	deadline := time.Now().Add(5 * time.Second)
	for l.funcs.next.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if wait := time.Until(time.Unix(0, l.funcs.next.Load())); wait < loadRetry-5*time.Second {
		t.Errorf("after a refused load, the next is %v away, want about %v", wait, loadRetry)
	}
	if l.funcs.on.Load() || l.funcs.fails.Load() != 0 {
		t.Errorf("on %v, fails %d after a refusal; want off, no passing failure counted", l.funcs.on.Load(), l.funcs.fails.Load())
	}
	if r, err := l.Allow(context.Background(), "k", PerSecond(1)); err != nil || !r.Allowed {
		t.Fatalf("a decision by script: %+v, %v", r, err)
	}
}
