package main

import (
	"context"
	"fmt"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/inspect"
)

// reset deletes key's state, every algorithm and layer, with core's
// Limiter.Reset, and says which states it found there first.
func reset(ctx context.Context, e *env, key string) error {
	if key == "" {
		return errNoKey
	}
	_, states, err := inspect.Read(ctx, e.rdb, e.prefix, e.key(key))
	if err != nil {
		return err
	}
	l, err := core.New(e.rdb, core.WithPrefix(e.prefix), core.WithLogger(nil))
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	if err := l.Reset(ctx, e.key(key)); err != nil {
		return err
	}
	deleted := []string{}
	for _, st := range states {
		deleted = append(deleted, st.Key)
	}
	if e.json {
		return e.emit(struct {
			Key     string   `json:"key"`
			Deleted []string `json:"deleted"`
		}{e.key(key), deleted})
	}
	_, err = fmt.Fprintf(e.out, "%s: reset, %d state key(s) deleted\n", e.key(key), len(deleted))
	for _, k := range deleted {
		e.printf("  %s\n", k)
	}
	return err
}
