package bench

import (
	"net/http"
	"testing"
)

// TestDeciders checks the wiring of every implementation against Redis in
// a fraction of a second: after priming, allowed traffic is all admitted
// and denied traffic all denied, without errors, and the Redis readings
// bracket the window.
func TestDeciders(t *testing.T) {
	needRedis(t)
	impls := append(append([]impl{}, oursAll...), oursPDC, redisRate, ulule, goredis)
	impls = append(impls, leaseImpls...)
	for _, alg := range algorithms {
		impls = append(impls, oursAlg(alg, false), oursAlg(alg, true))
	}
	for _, im := range impls {
		for _, s := range []scenario{{4, 10, allowed}, {4, 10, denied}} {
			t.Run(im.name+"/"+s.String(), func(t *testing.T) {
				d, c, done := setup(t, im, s)
				defer done()
				st := run(s.g, 200, 0, s.keys, d, c.ctr, nil, nil)
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
			})
		}
	}
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
