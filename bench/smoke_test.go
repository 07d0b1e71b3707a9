package bench

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlimit/redlimit/core"
)

// TestDeciders checks the wiring of every implementation against Redis in
// a fraction of a second: after priming, allowed traffic is all admitted
// and denied traffic all denied, without errors, and the Redis readings
// bracket the window.
func TestDeciders(t *testing.T) {
	needRedis(t)
	impls := append(append([]impl{}, oursAll...), oursPDC, oursFW, redisRate, ulule, goredis)
	impls = append(impls, leaseImpls...)
	for _, alg := range algorithms {
		impls = append(impls, oursAlg(alg, false), oursAlg(alg, true))
	}
	// A permit given back frees its place, so in flight is never denied
	// at a limit of 1 as the denied traffic needs: it runs allowed only.
	// A plain feature makes its calls per request, each its own.
	allowedOnly := map[string]bool{}
	callsPer1k := map[string]float64{}
	for _, f := range features {
		for _, batched := range []bool{false, true} {
			im := featureImpl(f, batched)
			impls = append(impls, im)
			allowedOnly[im.name] = f.id == "inflight"
			if !batched {
				callsPer1k[im.name] = 1000 * float64(f.calls)
			}
		}
	}
	for _, im := range impls {
		for _, s := range []scenario{{4, 10, allowed}, {4, 10, denied}} {
			if allowedOnly[im.name] && s.traffic != allowed {
				continue
			}
			t.Run(im.name+"/"+s.String(), func(t *testing.T) {
				st := smokeRun(t, im, s)
				if st.errs > 0 {
					t.Fatalf("%d errors; first: %v", st.errs, st.firstErr)
				}
				if got, want := st.ops, int64(200); got != want {
					t.Errorf("ops = %d, want %d", got, want)
				}
				want := 0.0
				if s.traffic == denied {
					want = 100
				}
				if got := st.deniedPct(); got != want {
					t.Errorf("denied = %.1f%%, want %.0f%%", got, want)
				}
				if want, ok := callsPer1k[im.name]; ok && s.traffic == allowed {
					if got := st.callsPer1k(); got < want {
						t.Errorf("Redis calls per 1000 requests = %.0f, want >= %.0f", got, want)
					}
				}
				// Only the clients that ask Redis once per decision.
				switch im.name {
				case oursPlain.name, redisRate.name, ulule.name, goredis.name:
					if got := st.callsPer1k(); got < 1000 {
						t.Errorf("Redis calls per 1000 decisions = %.0f, want >= 1000", got)
					}
				}
				if st.redisErr != nil {
					t.Fatalf("no Redis reading: %v", st.redisErr)
				}
				if cpu := st.redisCPUPerOp(); !(cpu >= 0) {
					t.Errorf("Redis CPU per decision = %v µs, want >= 0", cpu)
				}
				// Redis read at least what we wrote in the window.
				if st.redis.sent <= 0 || st.redis.netIn < st.redis.sent {
					t.Errorf("in the window we wrote %d bytes and Redis read %d", st.redis.sent, st.redis.netIn)
				}
				// Every decision that asked Redis ran a script, in the
				// settled form: FCALL for ours on Redis 7.
				switch im.name {
				case oursPlain.name, redisRate.name, ulule.name, goredis.name:
					if st.redis.scripts.calls < st.ops {
						t.Errorf("commandstats counted %d script calls for %d decisions", st.redis.scripts.calls, st.ops)
					}
				}
				if strings.HasPrefix(im.name, "ours/") || im.name == goredis.name {
					if f := st.form(); serverHasFunctions() && st.cmds > 0 && !strings.HasPrefix(f, "FCALL") {
						t.Errorf("on Redis %s the decisions reached Redis as %s, want FCALL", redisVersion(), f)
					}
				}
			})
		}
	}
}

// smokeRun primes and runs s against im once. Denied traffic spends each
// key's 1 a minute, and a fixed window is aligned on Redis' clock: a run
// that crosses a minute's end admits each key once more, so such a run is
// done again (on keys emptied by setup's cleanup).
func smokeRun(t *testing.T, im impl, s scenario) stats {
	for attempt := 0; ; attempt++ {
		m0 := redisMinute(t)
		d, c, done := setup(t, im, s)
		st := run(s.g, 200, 0, s.keys, d, c.ctr, nil, nil)
		done()
		if s.traffic != denied || attempt > 0 || redisMinute(t) == m0 {
			return st
		}
	}
}

// redisMinute is the minute Redis' clock is in.
func redisMinute(t *testing.T) int64 {
	rdb, err := adminClient()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.Unix() / 60
}

// TestHTTPApps checks that every app serves 200s in every mode, with the
// rate-limit headers exactly when limited.
func TestHTTPApps(t *testing.T) {
	needRedis(t)
	for _, app := range httpApps {
		for _, mode := range modesOf(app) {
			t.Run(app.name+"/"+mode.name, func(t *testing.T) {
				p, _, clean := httpPolicy(t, mode)
				defer clean()
				url, stop := app.start(t, p)
				defer stop()
				resp, err := http.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200", resp.StatusCode)
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); mode.bare() != (got == "") {
					t.Errorf("X-RateLimit-Limit = %q in mode %s", got, mode.name)
				}
				done, bad, _ := httpLoad(url, 8, 200, 0)
				if done != 200 || bad != 0 {
					t.Errorf("load: %d done, %d not 200; want 200, 0", done, bad)
				}
			})
		}
	}
}

// TestClientOptions checks that every contender's client has the same
// options (ContextTimeoutEnabled, pool, timeouts, retries, protocol...),
// every field but the functions (the dialer and hooks, made alike by
// clientOptions).
func TestClientOptions(t *testing.T) {
	needRedis(t)
	names := []string{"capture"}
	for _, c := range decisionContenders() {
		names = append(names, c.im.client)
	}
	for _, im := range append(append([]impl{}, denyCacheImpls...), oursAlg(core.TokenBucket, false), oursAlg(core.TokenBucket, true)) {
		names = append(names, im.client)
	}
	for _, app := range httpApps {
		for _, m := range modesOf(app) {
			if !m.bare() {
				names = append(names, m.client)
			}
		}
	}
	slices.Sort(names[1:])
	names = slices.Compact(names)
	// A client settles some options on its first connection (go-redis
	// turns maintenance notifications off where the server has none): as
	// in a measurement, where every client is primed, compare them after.
	for _, name := range names {
		if err := clientFor(t, name).rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	ref := clientFor(t, names[0]).rdb.Options()
	if !ref.ContextTimeoutEnabled || ref.PoolSize != 320 || ref.PoolTimeout != 5*time.Second {
		t.Errorf("%s: ContextTimeoutEnabled %v, PoolSize %d, PoolTimeout %v; want true, 320, 5s", names[0], ref.ContextTimeoutEnabled, ref.PoolSize, ref.PoolTimeout)
	}
	for _, name := range names[1:] {
		if diff := optionsDiff(ref, clientFor(t, name).rdb.Options()); diff != "" {
			t.Errorf("client %s differs from %s: %s", name, names[0], diff)
		}
	}
}

// optionsDiff names the fields in which a and b differ: functions apart,
// and interfaces by the type they hold (go-redis gives each client a push
// notification processor of its own).
func optionsDiff(a, b *redis.Options) string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var diff []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() || f.Type.Kind() == reflect.Func {
			continue
		}
		x, y := va.Field(i), vb.Field(i)
		if f.Type.Kind() == reflect.Interface {
			if x.IsNil() != y.IsNil() || !x.IsNil() && x.Elem().Type() != y.Elem().Type() {
				diff = append(diff, f.Name)
			}
			continue
		}
		if !reflect.DeepEqual(x.Interface(), y.Interface()) {
			diff = append(diff, f.Name)
		}
	}
	return strings.Join(diff, ", ")
}
