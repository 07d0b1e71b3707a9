package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/internal/inspect"
)

type stateJSON struct {
	Algorithm string         `json:"algorithm"`
	Calendar  bool           `json:"calendar,omitempty"`
	Layer     int            `json:"layer"`
	Key       string         `json:"redis_key"`
	TTLMillis int64          `json:"ttl_ms"` // -1: none
	Fields    map[string]any `json:"fields"` // numbers, and times in RFC 3339
}

// inspectKey prints every state Redis holds for the key args name,
// decoded; none is a failure, since the operator expected one.
func inspectKey(ctx context.Context, e *env, args []string) error {
	key, err := e.addr.key(e.name, args)
	if err != nil {
		return err
	}
	now, states, err := inspect.Read(ctx, e.rdb, e.prefix, key)
	if err != nil {
		return err
	}
	if e.json {
		out := struct {
			Key    string      `json:"key"`
			Now    time.Time   `json:"redis_time"`
			States []stateJSON `json:"states"`
			Error  string      `json:"error,omitempty"`
		}{Key: key, Now: now, States: []stateJSON{}}
		if len(states) == 0 {
			out.Error = e.noState(key)
		}
		for _, st := range states {
			j := stateJSON{st.Algorithm, st.Calendar, st.Layer, st.Key, st.TTL.Milliseconds(), map[string]any{}}
			if st.TTL < 0 {
				j.TTLMillis = -1
			}
			for _, f := range st.Fields {
				j.Fields[f.Name] = f.Value
				if f.Time {
					j.Fields[f.Name] = time.UnixMicro(int64(f.Value)).UTC()
				}
			}
			out.States = append(out.States, j)
		}
		if err := e.emit(out); err != nil || len(states) > 0 {
			return err
		}
		return errFailed
	}
	if len(states) == 0 {
		e.printf("%s\n", e.noState(key))
		return errFailed
	}
	for _, st := range states {
		printState(e, st, now)
	}
	return nil
}

// noState says that key holds nothing, and where that was looked for.
func (e *env) noState(key string) string {
	return fmt.Sprintf("%s: no state under prefix %q (nothing taken yet, or it expired; is -prefix the Limiter's, -name the Policy's?)", key, e.prefix)
}

func printState(e *env, st inspect.State, now time.Time) {
	name := st.Algorithm
	if st.Calendar {
		name += " (calendar)"
	}
	ttl := "no TTL"
	if st.TTL >= 0 {
		ttl = "TTL " + st.TTL.String()
	}
	e.printf("%s layer %d  %s  %s\n", name, st.Layer, st.Key, ttl)
	for _, f := range st.Fields {
		if !f.Time {
			// (A bucket refilled for a fraction of a tick holds a fraction.)
			e.printf("  %-12s %s\n", f.Name, strconv.FormatFloat(math.Round(f.Value*1000)/1000, 'f', -1, 64))
			continue
		}
		t := time.UnixMicro(int64(f.Value)).UTC()
		rel := now.Sub(t).Round(time.Millisecond).String() + " ago"
		if t.After(now) {
			rel = "in " + t.Sub(now).Round(time.Millisecond).String()
		}
		e.printf("  %-12s %s (%s)\n", f.Name, t.Format(time.RFC3339Nano), rel)
	}
}
