package core

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// grouping says which keys may share a script call: every key of a script
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
		return groupID{slot: slot(tag)}
	}
	return groupID{tag: tag}
}

// batcher puts the decisions of concurrent callers into one script call
// (see WithBatching). Decisions under one Limit on one group of keys form a
// batchGroup while a call of theirs is in flight; callers who come
// meanwhile queue, and one goroutine runs the queue, max per call, until it
// is empty. A lone caller runs its own call and never waits for company.
type batcher struct {
	max    int
	mu     sync.Mutex
	groups map[batchKey]*batchGroup
}

type batchKey struct {
	limit Limit
	id    groupID
}

type batchGroup struct {
	key   batchKey
	pr    *prepared
	queue []*pending
}

// pending is one queued decision. Its fields after queue are guarded by
// batcher.mu until it is answered on done.
type pending struct {
	keys    [2]string
	nkeys   int
	n, mode int
	res     Result
	err     error
	done    chan struct{}
	group   *batchGroup
	taken   bool // in a call: it will be answered
	dropped bool // its caller gave up: recycle it when answered
}

var (
	pendings = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}
	groups   = sync.Pool{New: func() any { return new(batchGroup) }}
)

func newBatcher(max int) *batcher {
	return &batcher{max: max, groups: make(map[batchKey]*batchGroup)}
}

func recycle(c *pending) {
	done := c.done
	*c = pending{done: done}
	pendings.Put(c)
}

// decide makes one decision, in a call of its own when no call of its group
// is in flight, else in the group's next call.
func (b *batcher) decide(ctx context.Context, l *Limiter, pr *prepared, id groupID, keys []string, n, mode int) (Result, error) {
	bk := batchKey{limit: pr.limit, id: id}
	b.mu.Lock()
	g := b.groups[bk]
	if g == nil {
		g = groups.Get().(*batchGroup)
		g.key, g.pr = bk, pr
		b.groups[bk] = g
		b.mu.Unlock()
		res, err := l.runOne(ctx, pr, keys, n, mode)
		b.release(l, g)
		return res, err
	}
	c := pendings.Get().(*pending)
	c.nkeys = copy(c.keys[:], keys)
	c.n, c.mode, c.group = n, mode, g
	g.queue = append(g.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		res, err := c.res, c.err
		recycle(c)
		return res, err
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-c.done:
			// Answered as the context ended: the answer stands (it may
			// have taken units).
			b.mu.Unlock()
			res, err := c.res, c.err
			recycle(c)
			return res, err
		default:
		}
		if c.taken {
			// Redis may still decide it: a request that gave up may be
			// counted (limits err on the strict side), never admitted.
			c.dropped = true
			b.mu.Unlock()
		} else {
			for i, q := range g.queue {
				if q == c {
					g.queue = append(g.queue[:i], g.queue[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
			recycle(c)
		}
		return Result{}, l.wrap(ctx, ctx.Err())
	}
}

// release ends the call of g's first caller: the callers who queued
// meanwhile go on in calls of their own goroutine.
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

// end forgets an idle group. b.mu is held.
func (b *batcher) end(g *batchGroup) {
	delete(b.groups, g.key)
	*g = batchGroup{queue: g.queue[:0]}
	groups.Put(g)
}

func (b *batcher) drain(l *Limiter, g *batchGroup) {
	calls := make([]*pending, 0, min(b.max, 16))
	for {
		b.mu.Lock()
		if len(g.queue) == 0 {
			b.end(g)
			b.mu.Unlock()
			return
		}
		k := min(len(g.queue), b.max)
		calls = append(calls[:0], g.queue[:k]...)
		rest := copy(g.queue, g.queue[k:])
		clear(g.queue[rest:])
		g.queue = g.queue[:rest]
		for _, c := range calls {
			c.taken = true
		}
		b.mu.Unlock()
		l.runBatch(g.pr, calls)
		b.mu.Lock()
		for _, c := range calls {
			if c.dropped {
				recycle(c)
			} else {
				c.done <- struct{}{}
			}
		}
		b.mu.Unlock()
	}
}

// runBatch decides calls in one script call, bounded by the Limiter's
// timeout (each caller also keeps its own deadline, and tells the breaker
// its outcome). Requests on one key go together, in the order they came.
func (l *Limiter) runBatch(pr *prepared, calls []*pending) {
	ctx, cancel := context.Background(), nop
	if l.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
	}
	defer cancel()
	byState := make(map[string][]*pending, len(calls))
	order := make([]string, 0, len(calls))
	for _, c := range calls {
		k := c.keys[0]
		if _, ok := byState[k]; !ok {
			order = append(order, k)
		}
		byState[k] = append(byState[k], c)
	}
	keys := make([]string, 0, len(order)*2)
	args := append(make([]any, 0, len(pr.args)+len(order)+2*len(calls)), pr.args...)
	sorted := make([]*pending, 0, len(calls))
	for _, k := range order {
		reqs := byState[k]
		keys = append(keys, reqs[0].keys[:reqs[0].nkeys]...)
		args = append(args, len(reqs))
		for _, c := range reqs {
			args = append(args, c.n, c.mode)
			sorted = append(sorted, c)
		}
	}
	v, err := l.eval(ctx, batchScripts[pr.limit.Algorithm], keys, args)
	results := make([]Result, len(sorted))
	if err == nil {
		vals, _ := v.([]any)
		err = parseResults(vals, results)
	}
	for i, c := range sorted {
		c.res, c.err = results[i], err
	}
}
