package main

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/inspect"
)

// reset deletes the state of the key args name, every algorithm and
// layer, with core's Limiter.Reset, and reports what it deleted: the
// states it found there, less those Reset leaves (the permits of requests
// in flight), which it lists as kept.
func reset(ctx context.Context, e *env, args []string) error {
	key, err := e.addr.key(e.name, args)
	if err != nil {
		return err
	}
	_, states, err := inspect.Read(ctx, e.rdb, e.prefix, key)
	if err != nil {
		return err
	}
	l, err := core.New(e.rdb, core.WithPrefix(e.prefix), core.WithLogger(nil))
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	if err := l.Reset(ctx, key); err != nil {
		return err
	}
	out := resetJSON{Key: key, Deleted: []string{}, Kept: []string{}, Listening: listeners(ctx, e.rdb, e.prefix)}
	for _, st := range states {
		if st.ResetKeeps {
			out.Kept = append(out.Kept, st.Key)
		} else {
			out.Deleted = append(out.Deleted, st.Key)
		}
	}
	if len(states) == 0 {
		out.Error = e.noState(key)
	}
	if e.json {
		if err := e.emit(out); err != nil {
			return err
		}
	} else {
		printReset(e, out)
	}
	if len(states) == 0 {
		return errFailed
	}
	return nil
}

type resetJSON struct {
	Key     string   `json:"key"`
	Deleted []string `json:"deleted"`
	Kept    []string `json:"kept"` // permits of requests in flight
	// Listening counts the Limiters told to forget the key's local state
	// (deny caches, leases); -1: unknown.
	Listening int    `json:"listening_instances"`
	Error     string `json:"error,omitempty"`
}

// listeners counts the subscribers of the prefix's reset channel: the
// Limiters with local state of keys that the Reset's message reached
// (each node of a Cluster counts its own), or -1.
func listeners(ctx context.Context, rdb redis.UniversalClient, prefix string) int {
	channel := inspect.ResetChannel(prefix)
	count := func(ctx context.Context, c *redis.Client) (int, error) {
		n, err := c.PubSubNumSub(ctx, channel).Result()
		return int(n[channel]), err
	}
	switch c := rdb.(type) {
	case *redis.Client:
		if n, err := count(ctx, c); err == nil {
			return n
		}
	case *redis.ClusterClient:
		var mu sync.Mutex
		total := 0
		err := c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			n, err := count(ctx, c)
			mu.Lock()
			total += n
			mu.Unlock()
			return err
		})
		if err == nil {
			return total
		}
	}
	return -1
}

func printReset(e *env, out resetJSON) {
	if out.Error != "" {
		e.printf("%s\n", out.Error)
		return
	}
	e.printf("%s: reset, %d state key(s) deleted\n", out.Key, len(out.Deleted))
	for _, k := range out.Deleted {
		e.printf("  %s\n", k)
	}
	switch {
	case out.Listening > 0:
		e.printf("told %d instance(s) with deny caches or leases, which forget the key as the message arrives\n", out.Listening)
	case out.Listening < 0:
		e.printf("could not count the instances told (PUBSUB NUMSUB failed): instances with deny caches or leases that missed it forget it when they reconnect\n")
	}
	if len(out.Kept) > 0 {
		e.printf("kept %d: the permits of requests in flight, each given back when its request ends or its lease lapses\n", len(out.Kept))
		for _, k := range out.Kept {
			e.printf("  %s\n", k)
		}
	}
}
