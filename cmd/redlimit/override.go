package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/inspect"
)

type overrideJSON struct {
	Name     string `json:"name"`
	Found    bool   `json:"found"`
	Limit    string `json:"limit,omitempty"`
	TTLMilli int64  `json:"ttl_ms,omitempty"` // -1: until deleted
}

// getOverride reads name's override itself, rather than through
// Overrides.Get, whose reads give up after 50ms (a request's budget, not
// an operator's on a distant link), and tells its TTL.
func getOverride(ctx context.Context, e *env, name string) (overrideJSON, error) {
	res := overrideJSON{Name: name}
	key := inspect.OverrideKey(e.prefix, name)
	pipe := e.rdb.Pipeline()
	get, ttl := pipe.Get(ctx, key), pipe.PTTL(ctx, key)
	if _, err := pipe.Exec(ctx); errors.Is(err, redis.Nil) {
		return res, nil
	} else if err != nil {
		return res, fmt.Errorf("override get %s: %w", key, err)
	}
	var l core.Limit
	if err := l.UnmarshalText([]byte(get.Val())); err != nil {
		return res, fmt.Errorf("override %s holds %q: %w", key, get.Val(), err)
	}
	res.Found, res.Limit, res.TTLMilli = true, l.String(), ttl.Val().Milliseconds()
	if ttl.Val() < 0 {
		res.TTLMilli = -1
	}
	return res, nil
}

// override reads or writes name's entry in core.Overrides under -prefix.
func override(ctx context.Context, e *env, verb, name string, rest []string) error {
	o, err := core.NewOverrides(e.rdb, e.prefix, 0)
	if err != nil {
		return err
	}
	res := overrideJSON{Name: name}
	switch {
	case verb == "get" && len(rest) == 0:
		res, err = getOverride(ctx, e, name)
	case verb == "set" && len(rest) == 1:
		var l core.Limit
		if err := l.UnmarshalText([]byte(rest[0])); err != nil {
			return err
		}
		err = o.Set(ctx, name, l, e.ttl)
		res.Found, res.Limit, res.TTLMilli = true, l.String(), e.ttl.Milliseconds()
		if e.ttl == 0 {
			res.TTLMilli = -1
		}
	case verb == "delete" && len(rest) == 0:
		err = o.Delete(ctx, name)
	default:
		return flag.ErrHelp
	}
	if err != nil {
		return err
	}
	if e.json {
		return e.emit(res)
	}
	switch {
	case verb == "delete":
		_, err = fmt.Fprintf(e.out, "%s: override deleted; instances return to their default limit\n", name)
	case !res.Found:
		_, err = fmt.Fprintf(e.out, "%s: no override\n", name)
	case res.TTLMilli > 0:
		_, err = fmt.Fprintf(e.out, "%s: %s for %v\n", name, res.Limit, time.Duration(res.TTLMilli)*time.Millisecond)
	default:
		_, err = fmt.Fprintf(e.out, "%s: %s until deleted\n", name, res.Limit)
	}
	return err
}
