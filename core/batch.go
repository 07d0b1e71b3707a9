package core

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// grouping says which keys may share a script call: every key of a call
// must live on the node that runs it.
type grouping uint8

const (
	groupNode grouping = iota // one Redis: every key
	groupSlot                 // a Cluster: the keys of one hash slot
	groupTag                  // any other client (a Ring): one caller key
)

func groupingOf(rdb redis.UniversalClient) grouping {
	switch rdb.(type) {
	case *redis.Client:
		return groupNode
	case *redis.ClusterClient:
		return groupSlot
	}
	return groupTag
}

// groupID names one group of keys.
type groupID struct {
	slot int
	tag  string
}

func (g grouping) of(tag string) groupID {
	switch g {
	case groupNode:
		return groupID{}
	case groupSlot:
		return groupID{slot: slot(slotTag(tag))}
	}
	return groupID{tag: slotTag(tag)}
}

// batcher puts the decisions of concurrent callers into shared calls (see
// WithBatching). Decisions under one plan on one group of keys form a
// batchGroup while calls of theirs are in flight. A caller that finds
// fewer than inflight calls of its group in flight makes its own at once,
// so a lone or lightly loaded caller never waits for company; callers
// beyond that queue, and each call that returns takes the queue (max per
// call) before its slot is free again. So the calls in flight per group
// never exceed inflight, and batches grow only under load.
type batcher struct {
	max, inflight int
	mu            sync.Mutex
	groups        map[batchKey]*batchGroup
	// spare is the last group forgotten, for the next to reuse: a caller
	// alone makes and forgets a group per decision.
	spare *batchGroup
}

type batchKey struct {
	pl *plan
	id groupID
}

type batchGroup struct {
	key   batchKey
	calls int        // in flight
	queue []*pending // in arrival order; dropped ones are skipped
}

// pending is one queued decision. Its caller and the call that takes it
// settle who owns it through state alone, so that thousands of callers
// giving up at once (a Redis that stalls) do not queue on batcher.mu.
type pending struct {
	rq    request
	keys  [2 * maxRules]string
	nkeys int
	res   [maxRules]Result
	err   error
	done  chan struct{}
	state atomic.Int32
}

// A pending goes from pendingQueued to pendingInCall (a call took it) to
// pendingAnswered (res and err are set, done is signalled), or to
// pendingLeft when its caller gives up first: whoever finds it there
// recycles it.
const (
	pendingQueued int32 = iota
	pendingInCall
	pendingAnswered
	pendingLeft
)

var pendings = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newBatcher(max, inflight int) *batcher {
	return &batcher{max: max, inflight: inflight, groups: make(map[batchKey]*batchGroup)}
}

func recycle(c *pending) {
	c.rq, c.keys, c.nkeys, c.res, c.err = request{}, [2 * maxRules]string{}, 0, [maxRules]Result{}, nil
	c.state.Store(pendingQueued)
	pendings.Put(c)
}

// decide makes one decision: in a call of its own when its group has a
// call to spare, else in one of the group's next calls.
func (b *batcher) decide(ctx context.Context, l *Limiter, rq *request, id groupID, keys []string, out []Result) error {
	bk := batchKey{pl: rq.pl, id: id}
	b.mu.Lock()
	g := b.groups[bk]
	if g == nil {
		if g = b.spare; g != nil {
			b.spare, g.key = nil, bk
		} else {
			g = &batchGroup{key: bk}
		}
		b.groups[bk] = g
	}
	if g.calls < b.inflight {
		g.calls++
		b.mu.Unlock()
		err := l.runOne(ctx, rq, keys, out)
		b.release(l, g)
		return err
	}
	c := pendings.Get().(*pending)
	c.rq = *rq
	c.nkeys = copy(c.keys[:], keys)
	g.queue = append(g.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.answer(out)
	case <-ctx.Done():
	case <-caller(ctx).Done():
	}
	// A request already taken into a call may still be decided: the call
	// gives back what it took for a caller that left (see giveBackLeft).
	// One still queued is skipped.
	if c.state.CompareAndSwap(pendingQueued, pendingLeft) || c.state.CompareAndSwap(pendingInCall, pendingLeft) {
		return l.wrap(ctx, ended(ctx))
	}
	// Answered as the context ended: the answer stands (it may have taken
	// units).
	<-c.done
	return c.answer(out)
}

// answer hands c's results to its caller and recycles it.
func (c *pending) answer(out []Result) error {
	copy(out, c.res[:len(out)])
	err := c.err
	recycle(c)
	return err
}

// release ends a call of g: if callers queued meanwhile, the slot goes on
// with them, on a goroutine of its own.
func (b *batcher) release(l *Limiter, g *batchGroup) {
	b.mu.Lock()
	if len(g.queue) > 0 {
		b.mu.Unlock()
		go b.drain(l, g)
		return
	}
	b.end(g)
	b.mu.Unlock()
}

// end frees a slot of g, and forgets g once it is idle. b.mu is held.
func (b *batcher) end(g *batchGroup) {
	g.calls--
	if g.calls == 0 && len(g.queue) == 0 {
		delete(b.groups, g.key)
		g.key, b.spare = batchKey{}, g // (no plan kept alive by it)
	}
}

// drain runs g's queue, max per call, until it is empty.
func (b *batcher) drain(l *Limiter, g *batchGroup) {
	calls := make([]*pending, 0, min(b.max, 16))
	for {
		b.mu.Lock()
		calls = calls[:0]
		for len(g.queue) > 0 && len(calls) < b.max {
			c := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			if !c.state.CompareAndSwap(pendingQueued, pendingInCall) {
				recycle(c) // its caller left
				continue
			}
			calls = append(calls, c)
		}
		if len(g.queue) == 0 {
			g.queue = nil // let a long queue's array go
		}
		if len(calls) == 0 {
			b.end(g)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		l.runBatch(g.key.pl, calls)
		for _, c := range calls {
			if c.state.CompareAndSwap(pendingInCall, pendingAnswered) {
				c.done <- struct{}{}
			} else {
				l.giveBackLeft(c) // its caller left, told it was not admitted
				recycle(c)
			}
		}
	}
}

// giveBackLeft refunds what c's call took for a caller that left while
// the call ran, as if it had never been taken: its caller was told it was
// not admitted (TestBatchLeftCallerGivenBack). A refund that fails leaves
// the units taken, on the strict side.
func (l *Limiter) giveBackLeft(c *pending) {
	if c.err != nil || (c.rq.mode != modeConsume && c.rq.mode != modeAtMost) {
		return
	}
	rq := c.rq
	rq.mode, rq.n, rq.taken = modeRefund, 0, c.res[0].stamp
	for j, ly := range rq.pl.layers {
		if c.res[j].Granted <= 0 {
			return // refused: nothing taken
		}
		rq.pos[j] = c.res[j].pos
		if rq.n == 0 && !ly.row.ids {
			rq.n = c.res[j].Granted // the rate layers' units; a permit is 1
		}
	}
	rq.n = max(rq.n, 1)
	ctx, cancel := l.bound(context.Background())
	defer cancel()
	var out [maxRules]Result
	if err := l.runOne(ctx, &rq, c.keys[:c.nkeys], out[:len(rq.pl.layers)]); err != nil {
		if log := l.log(); log != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "redlimit: the units of a caller that left during its call were not given back", slog.Any("error", err))
		}
	}
}

// runBatch decides calls in one script call, bounded by the Limiter's
// timeout (each caller also keeps its own deadline, and tells the breaker
// its outcome).
func (l *Limiter) runBatch(pl *plan, calls []*pending) {
	ctx, cancel := l.bound(context.Background())
	defer cancel()
	groups := byState(pl, calls)
	head, _ := pl.argv(l.clock())
	keys := make([]string, 0, len(groups)*pl.nkeys)
	args := append(make([]any, 0, len(head)+3*len(calls)), head...)
	sorted := make([]*pending, 0, len(calls))
	refunds := false
	for _, reqs := range groups {
		keys = append(keys, reqs[0].keys[:reqs[0].nkeys]...)
		for i, c := range reqs {
			code := c.rq.n*8 + c.rq.mode // (n >= 1: never 0, whose sign is lost)
			if i < len(reqs)-1 {
				code = -code // the key's next request follows
			}
			args = c.rq.appendTail(append(args, code))
			sorted = append(sorted, c)
			refunds = refunds || c.rq.mode == modeRefund
		}
	}
	v, err := l.call(ctx, pl, keys, args, false, refunds)
	nl := len(pl.layers)
	if len(groups) > 1 && requestsOwn(ctx, err) {
		l.runAlone(ctx, sorted, err, nl)
		return
	}
	results := make([]Result, nl*len(sorted))
	if err == nil {
		err = parseResults(v, results, pl, func(i int) int { return sorted[i].rq.takes() })
	}
	for i, c := range sorted {
		copy(c.res[:nl], results[i*nl:])
		c.err = err
	}
}

// byState groups calls by their state keys, in the order they came.
func byState(pl *plan, calls []*pending) [][]*pending {
	at := make(map[string]int, len(calls))
	var groups [][]*pending
	for _, c := range calls {
		k := c.keys[0]
		if len(pl.layers) > 1 {
			// Rules of several keys (a user's and an organisation's)
			// share a state only if they share every key
			// (TestBatchAttackRulesOfSeveralKeys).
			k = joinKeys(c.keys[:c.nkeys])
		}
		i, ok := at[k]
		if !ok {
			i, at[k] = len(groups), len(groups)
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// runAlone decides each of calls alone, at once, after a key that holds
// a value redlimit did not write stopped their batch with err: only that
// key's callers see it (TestBatchAttackPoisonKey), the others wait one
// more round trip (TestBatchAttackPoisonKeySlowNetwork). Units taken before
// it stopped stay taken; a refund, never sent twice, reports err.
func (l *Limiter) runAlone(ctx context.Context, calls []*pending, err error, nl int) {
	var wg sync.WaitGroup
	for _, c := range calls {
		c.err = err
		if c.rq.mode != modeRefund {
			wg.Go(func() { c.err = l.runOne(ctx, &c.rq, c.keys[:c.nkeys], c.res[:nl]) })
		}
	}
	wg.Wait()
}

// joinKeys is keys as one string that no other list of keys spells: each
// key after its length.
func joinKeys(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// requestsOwn reports whether err is an error reply that is a request's
// own, not Redis failing (see redisFault).
func requestsOwn(ctx context.Context, err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && !redisFault(ctx, err)
}
