package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/redlimit/redlimit/core"
)

type overrideJSON struct {
	Name     string `json:"name"`
	Found    bool   `json:"found"`
	Limit    string `json:"limit,omitempty"`
	TTLMilli int64  `json:"ttl_ms,omitempty"` // set: 0 until deleted
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
		var l core.Limit
		l, res.Found, err = o.Get(ctx, name)
		if res.Found {
			res.Limit = l.String()
		}
	case verb == "set" && len(rest) == 1:
		var l core.Limit
		if err := l.UnmarshalText([]byte(rest[0])); err != nil {
			return err
		}
		err = o.Set(ctx, name, l, e.ttl)
		res.Found, res.Limit, res.TTLMilli = true, l.String(), e.ttl.Milliseconds()
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
	case verb == "set" && e.ttl > 0:
		_, err = fmt.Fprintf(e.out, "%s: %s for %v\n", name, res.Limit, e.ttl)
	default:
		_, err = fmt.Fprintf(e.out, "%s: %s\n", name, res.Limit)
	}
	return err
}
