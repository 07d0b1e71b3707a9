package bench

import (
	"net/http"
	"testing"
)

// TestDeciders checks the wiring of every implementation against Redis in
// a fraction of a second: after priming, allowed traffic is all admitted
// and denied traffic all denied, without errors.
func TestDeciders(t *testing.T) {
	needRedis(t)
	impls := append(append([]impl{}, oursAll...), redisRate, ulule, goredis)
	for _, im := range impls {
		for _, s := range []scenario{{4, 10, allowed}, {4, 10, denied}} {
			t.Run(im.name+"/"+s.String(), func(t *testing.T) {
				d, c := setup(t, im, s)
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
				if got := st.callsPer1k(); im.name != oursDC.name && got < 1000 {
					t.Errorf("Redis calls per 1000 decisions = %.0f, want >= 1000", got)
				}
			})
		}
	}
}

// TestHTTPApps checks that every app serves 200s, bare and limited.
func TestHTTPApps(t *testing.T) {
	needRedis(t)
	for _, app := range httpApps {
		for _, mode := range httpModes {
			t.Run(app.name+"/"+mode, func(t *testing.T) {
				url, stop := app.start(t, httpLimiter(t, mode))
				defer stop()
				resp, err := http.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200", resp.StatusCode)
				}
				if got := resp.Header.Get("X-RateLimit-Limit"); (mode != "bare") != (got != "") {
					t.Errorf("X-RateLimit-Limit = %q in mode %s", got, mode)
				}
				done, bad, _ := httpLoad(url, 8, 200, 0)
				if done != 200 || bad != 0 {
					t.Errorf("load: %d done, %d not 200; want 200, 0", done, bad)
				}
			})
		}
	}
}
