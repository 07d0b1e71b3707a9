package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/inspect"
)

// The operator's tool reads states through package inspect, so that the
// key encoding and the state formats have one home, here beside the
// scripts, and core's API does not grow.
func init() {
	inspect.Read = readStates
	inspect.Library = libraryName
	inspect.ResetChannel = func(prefix string) string {
		if prefix == "" {
			prefix = defaultConfig().prefix
		}
		return resetChannel(prefix)
	}
	inspect.OverrideKey = func(prefix, name string) string {
		if prefix == "" {
			prefix = defaultConfig().prefix
		}
		return (&Overrides{prefix: overridesPrefix(prefix)}).key(name)
	}
}

// stateReader decodes the state held at key, given Redis' clock in µs.
type stateReader func(ctx context.Context, rdb redis.Cmdable, key string, now int64) ([]inspect.Field, error)

// stateReaders has one reader per key suffix of the algorithms table, each
// decoding what the script writes (see "State" at the top of each
// scripts/*.lua).
var stateReaders = map[string]stateReader{
	":tb4":  stringState(tokenBucketState),
	":sw3":  slidingLogState,
	":sw3m": stringState(slidingMetaState),
	":swc3": stringState(windowCounterState),
	":fw4":  periodWindowState,
	":fw4o": periodWindowState,
	":cw3":  stringState(fixedWindowState),
	":lb4":  stringState(leakyBucketState),
	":cc3":  permitsState,
}

// stateKey is one Redis key a caller's state may live in.
type stateKey struct {
	row   *algorithm
	layer int
	key   string
	read  stateReader
}

// readStates is inspect.Read: the states Redis holds for key under prefix,
// every algorithm and layer, as Reset would delete them.
func readStates(ctx context.Context, rdb redis.UniversalClient, prefix, key string) (time.Time, []inspect.State, error) {
	if key == "" {
		return time.Time{}, nil, ErrEmptyKey
	}
	if prefix == "" {
		prefix = defaultConfig().prefix
	}
	prefix, tag := escapeBraces.Replace(prefix), escapeTag(key)
	var keys []stateKey
	for layer := range maxRules {
		for _, row := range rows() {
			for i, k := range stateKeys(nil, prefix, tag, &row, layer) {
				keys = append(keys, stateKey{row: &row, layer: layer, key: k, read: stateReaders[row.suffixes[i]]})
			}
		}
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("core: inspect: TIME: %w", err)
	}
	// Every key of one caller is in one slot: one round trip finds them.
	pipe := rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(ctx, k.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return now, nil, fmt.Errorf("core: inspect: PTTL: %w", err)
	}
	var states []inspect.State
	for i, k := range keys {
		ttl := ttls[i].Val()
		if ttl == -2 { // no such key
			continue
		}
		fields, err := k.read(ctx, rdb, k.key, now.UnixMicro())
		if errors.Is(err, redis.Nil) {
			continue // expired since
		}
		if err != nil {
			return now, states, fmt.Errorf("core: inspect %s: %w", k.key, err)
		}
		states = append(states, inspect.State{Algorithm: k.row.name, Calendar: k.row.script == calendarWindow.script,
			Layer: k.layer, Key: k.key, TTL: ttl, Fields: fields, ResetKeeps: k.row.ids})
	}
	return now, states, nil
}

// stringState reads a string state and decodes it with parse.
func stringState(parse func(v string, now int64) ([]inspect.Field, error)) stateReader {
	return func(ctx context.Context, rdb redis.Cmdable, key string, now int64) ([]inspect.Field, error) {
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		return parse(v, now)
	}
}

// stateInts parses a state of between lo and hi integers.
func stateInts(v string, lo, hi int) ([]int64, error) {
	f := strings.Fields(v)
	if len(f) < lo || len(f) > hi {
		return nil, fmt.Errorf("holds %q, not a state redlimit writes", v)
	}
	out := make([]int64, len(f))
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("holds %q, not a state redlimit writes", v)
		}
		out[i] = n
	}
	return out, nil
}

// bucketInts reads a bucket's five fields, of which the third is its
// Limit's "<period>:<rate>[:<capacity>]": the period is the scale.
func bucketInts(v string) ([]int64, error) {
	f := strings.Fields(v)
	if len(f) == 5 {
		f[2], _, _ = strings.Cut(f[2], ":")
	}
	return stateInts(strings.Join(f, " "), 5, 5)
}

func count(name string, v int64) inspect.Field { return inspect.Field{Name: name, Value: float64(v)} }
func instant(name string, µs int64) inspect.Field {
	return inspect.Field{Name: name, Value: float64(µs), Time: true}
}

// ahead adds debt_until to fields when a window state lies ahead of the
// clock: it refuses every request until then (a CHARGE's debt, or a clock
// step back).
func ahead(fields []inspect.Field, start, now int64) []inspect.Field {
	if start > now {
		fields = append(fields, instant("debt_until", start))
	}
	return fields
}

// tokenBucketState: "<tokens> <time> <scale>:<rate>:<capacity> <taken>
// <epoch>", tokens in 1/scale of a token, negative while in debt, as they were at time (taken
// and epoch place a give-back's take: they are no quota, so not shown).
func tokenBucketState(v string, _ int64) ([]inspect.Field, error) {
	n, err := bucketInts(v)
	if err != nil || n[2] <= 0 {
		return nil, fmt.Errorf("holds %q, not a token bucket", v)
	}
	tokens := float64(n[0]) / float64(n[2])
	fields := []inspect.Field{{Name: "tokens", Value: tokens}, instant("at", n[1])}
	if tokens < 0 {
		fields = append(fields, inspect.Field{Name: "debt", Value: -tokens})
	}
	return fields, nil
}

// leakyBucketState: "<queued> <time> <scale>:<rate> <taken> <epoch>", queued in
// 1/scale of a unit (above the capacity while in debt), as they were at
// time (taken and epoch: see tokenBucketState).
func leakyBucketState(v string, _ int64) ([]inspect.Field, error) {
	n, err := bucketInts(v)
	if err != nil || n[2] <= 0 {
		return nil, fmt.Errorf("holds %q, not a leaky bucket", v)
	}
	return []inspect.Field{{Name: "queued", Value: float64(n[0]) / float64(n[2])}, instant("at", n[1])}, nil
}

// fixedWindowState: "<start> <count>", or "<start> <end> <count>[ <ordinal>]"
// for a calendar window (the ordinal only while it holds a debt).
func fixedWindowState(v string, now int64) ([]inspect.Field, error) {
	n, err := stateInts(v, 2, 4)
	if err != nil {
		return nil, err
	}
	fields := []inspect.Field{instant("window_start", n[0])}
	if len(n) >= 3 {
		fields = append(fields, instant("window_end", n[1]), count("count", n[2]))
	} else {
		fields = append(fields, count("count", n[1]))
	}
	if len(n) == 4 { // a calendar debt: it refuses through ordinal + ceil(count/Rate) - 1
		fields = append(fields, count("window_ordinal", n[3]))
	}
	return ahead(fields, n[0], now), nil
}

// periodWindowState: an integer, tag * 2^36 + count (plus 2^35 while the
// window lies ahead, holding a debt), whose expiry is the window's end.
func periodWindowState(ctx context.Context, rdb redis.Cmdable, key string, now int64) ([]inspect.Field, error) {
	v, err := rdb.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("holds a value that is not a state redlimit writes: %w", err)
	}
	ttl, terr := rdb.PTTL(ctx, key).Result()
	if err != nil || terr != nil {
		return nil, errors.Join(err, terr)
	}
	const m, aheadBit = 1 << 36, 1 << 35
	if v < m || ttl < 0 {
		return nil, fmt.Errorf("holds %d with TTL %v, not a fixed window redlimit writes", v, ttl)
	}
	c, end := v%m, now+ttl.Microseconds()
	fields := []inspect.Field{instant("window_end", end), count("count", c%aheadBit), count("window_tag", v/m)}
	if c >= aheadBit {
		// Refused until the window starts, a Period (the Limit's, not
		// the state's) before its end: debt_until says the end.
		fields = append(fields, instant("debt_until", end))
	}
	return fields, nil
}

// windowCounterState: "<start> <count> <previous>".
func windowCounterState(v string, now int64) ([]inspect.Field, error) {
	n, err := stateInts(v, 3, 3)
	if err != nil {
		return nil, err
	}
	fields := []inspect.Field{instant("window_start", n[0]), count("count", n[1]), count("previous", n[2])}
	return ahead(fields, n[0], now), nil
}

// slidingMetaState: "<T> <trimmed> <oldest> <newest> <nw> <m>[ <S> <r>...]";
// the count is T - trimmed - the credits of entries still in the log.
func slidingMetaState(v string, now int64) ([]inspect.Field, error) {
	n, err := stateInts(v, 6, 6+2*8)
	if err != nil || len(n)%2 != 0 {
		return nil, fmt.Errorf("holds %q, not a sliding window", v)
	}
	units := n[0] - n[1]
	for i := 6; i < len(n); i += 2 {
		if n[i] > n[1] {
			units -= n[i+1]
		}
	}
	fields := []inspect.Field{count("count", units), count("entries", n[5])}
	if n[5] > 0 {
		fields = append(fields, instant("oldest", n[2]), instant("newest", n[3]))
	}
	return ahead(fields, n[3], now), nil
}

// slidingLogState: the log beside the meta, a sorted set of entries.
func slidingLogState(ctx context.Context, rdb redis.Cmdable, key string, _ int64) ([]inspect.Field, error) {
	n, err := rdb.ZCard(ctx, key).Result()
	return []inspect.Field{count("entries", n)}, err
}

// permitsState: a sorted set of permits, each scored by the µs it lapses.
func permitsState(ctx context.Context, rdb redis.Cmdable, key string, now int64) ([]inspect.Field, error) {
	at := strconv.FormatInt(now, 10)
	pipe := rdb.Pipeline()
	live := pipe.ZCount(ctx, key, "("+at, "+inf")
	lapsed := pipe.ZCount(ctx, key, "0", at) // (given back: below 0)
	next := pipe.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "(" + at, Max: "+inf", Count: 1})
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	fields := []inspect.Field{count("in_flight", live.Val()), count("lapsed", lapsed.Val())}
	if z := next.Val(); len(z) > 0 {
		fields = append(fields, instant("next_lapse", int64(z[0].Score)))
	}
	return fields, nil
}
