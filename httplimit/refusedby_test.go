package httplimit

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestRefusedBySweep walks the limits that can refuse a request (the
// Limit alone, the Limit or a layer of several, two with different waits,
// the InFlight permit, a ceiling (a Scope without a Key), a Scope keyed by
// the client's network), each with and without DryRun and a
// deny cache, repeats the refusal, and ends with Redis failing. For every
// decision it checks RefusedBy, what the Observer is told, and the
// headers: the RateLimit member named "<Name>-<RefusedBy>" (the Name alone
// for a single layer) is the one refused, r=0 and t the Retry-After (sent
// unless a dry run), and X-RateLimit-Limit is the capacity of the refusing
// layer (of the strictest rate layer when only the permit refuses, as
// Result reports it).
// Guards: RefusedBy's godoc ("0" for the Limit, "1", "2", ... for
// Config.Layers, a Scope's Name, "inflight"; "" for any other outcome; the one
// Result reports) and IETF's "on a refused response t is the same point in
// time as Retry-After ... for each layer that refused".
// keyByNet keys a request by the /16 of its peer: a Scope's key that
// several clients share.
var keyByNet KeyFunc = func(r Request) (string, error) {
	host, _, _ := strings.Cut(r.RemoteAddr(), ":")
	parts := strings.Split(host, ".")
	if len(parts) < 2 {
		return "", nil
	}
	return parts[0] + "." + parts[1], nil
}

func TestRefusedBySweep(t *testing.T) {
	hourly2 := core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Hour}
	minutely2 := core.Limit{Algorithm: core.FixedWindow, Rate: 2, Period: time.Minute}
	minutely3 := core.Limit{Algorithm: core.FixedWindow, Rate: 3, Period: time.Minute}
	type step struct {
		ip        string
		hold      bool   // keep the request in flight (no Finish)
		refusedBy string // "" when admitted
		member    string // the RateLimit member of RefusedBy
		limit     string // X-RateLimit-Limit on the refusal
	}
	admit := func(ip string) step { return step{ip: ip} }
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"the Limit alone", Config{Limit: minutely2}, []step{
			admit("192.0.2.1"), admit("192.0.2.1"), {"192.0.2.1", false, "0", `"api"`, "2"}}},
		{"the Limit, of two layers", Config{Limit: minutely2, Layers: []core.Limit{core.PerHour(100)}}, []step{
			admit("192.0.2.1"), admit("192.0.2.1"), {"192.0.2.1", false, "0", `"api-0"`, "2"}}},
		{"layer 1", Config{Limit: core.PerSecond(10), Layers: []core.Limit{hourly2}}, []step{
			admit("192.0.2.1"), admit("192.0.2.1"), {"192.0.2.1", false, "1", `"api-1"`, "2"}}},
		{"layer 2 of three", Config{Limit: core.PerSecond(10), Layers: []core.Limit{core.PerHour(100), hourly2}}, []step{
			admit("192.0.2.1"), admit("192.0.2.1"), {"192.0.2.1", false, "2", `"api-2"`, "2"}}},
		{"two refuse: the longer wait", Config{Limit: minutely2, Layers: []core.Limit{hourly2, minutely3}}, []step{
			admit("192.0.2.1"), admit("192.0.2.1"), {"192.0.2.1", false, "1", `"api-1"`, "2"}}},
		{"the InFlight permit", Config{Limit: core.PerSecond(10), InFlight: 1}, []step{
			{ip: "192.0.2.1", hold: true}, {"192.0.2.1", false, "inflight", `"api-inflight"`, "10"}}},
		{"the permit and a layer: the layer", Config{Limit: core.PerSecond(10), Layers: []core.Limit{hourly2}, InFlight: 1}, []step{
			admit("192.0.2.1"), {ip: "192.0.2.1", hold: true}, {"192.0.2.1", false, "1", `"api-1"`, "2"}}},
		{"the Global", Config{Limit: core.PerHour(100), Scopes: []Scope{{Name: "global", Limit: hourly2}}}, []step{
			admit("192.0.2.1"), admit("192.0.2.2"), {"192.0.2.3", false, "global", `"api-global"`, "2"}}},
		{"a Scope with a Key, beside a ceiling and the permit", Config{Limit: core.PerHour(100), InFlight: 5, Scopes: []Scope{
			{Name: "net", Key: keyByNet, Limit: hourly2}, {Name: "global", Limit: core.PerHour(100)}}}, []step{
			admit("192.0.2.1"), admit("192.0.2.2"), {"192.0.2.3", false, "net", `"api-net"`, "2"}, admit("198.51.100.1")}},
	}
	for _, tt := range tests {
		for _, opts := range []struct{ dryRun, denyCache bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			t.Run(tt.name+"/dryrun="+strconv.FormatBool(opts.dryRun)+",denycache="+strconv.FormatBool(opts.denyCache), func(t *testing.T) {
				mr, rdb := redistest.Mini(t)
				var l *core.Limiter
				if opts.denyCache {
					l = newLimiter(t, rdb, core.WithDenyCache(100))
				} else {
					l = newLimiter(t, rdb)
				}
				dryRun := opts.dryRun
				var obs observed
				cfg := tt.cfg
				cfg.Limiter, cfg.Name, cfg.DryRun, cfg.Observers = l, "api", dryRun, []Observer{&obs}
				cfg.Headers = Headers{XRateLimit{}, IETF{}}
				p := mustNew(t, cfg)
				// The refusal once more: the deny cache's answer, if on,
				// names the same limit.
				steps := append(tt.steps, tt.steps[len(tt.steps)-1])
				for i, s := range steps {
					name := "request " + strconv.Itoa(i+1)
					d, h := decide(p, from(s.ip))
					if !s.hold && d.wantsFinish() {
						d.finish(http.StatusOK)
					}
					checkRefusedBy(t, name, d, h, s.refusedBy, s.member, s.limit)
					if got := obs.decisions[len(obs.decisions)-1].RefusedBy; got != d.RefusedBy {
						t.Errorf("%s: the Observer was told RefusedBy %q, the Decision says %q", name, got, d.RefusedBy)
					}
					if again := i == len(steps)-1; again && opts.denyCache && cfg.InFlight == 0 && s.refusedBy != "global" && !d.Result.Cached {
						t.Errorf("%s: the deny cache did not answer the refusal again", name)
					}
				}
				mr.SetError("MASTERDOWN the test's fault")
				// A client with no denial cached: Redis is asked.
				if d := p.testDecide(from("192.0.2.9")); d.Err == nil || d.RefusedBy != "" {
					t.Errorf("Redis failing: %v (err %v), RefusedBy %q; want a failure and none", d.Outcome, d.Err, d.RefusedBy)
				}
			})
		}
	}
}

func checkRefusedBy(t *testing.T, name string, d Decision, h http.Header, refusedBy, member, limit string) {
	t.Helper()
	refused := d.Outcome == OutcomeDenied || d.Outcome == OutcomeInFlight
	if d.RefusedBy != refusedBy || refused != (refusedBy != "") {
		t.Fatalf("%s: %v (err %v), RefusedBy %q; want RefusedBy %q", name, d.Outcome, d.Err, d.RefusedBy, refusedBy)
	}
	if !refused {
		return
	}
	var got string
	for m := range strings.SplitSeq(h.Get("RateLimit"), ", ") {
		if strings.HasPrefix(m, member+";") {
			got = m
		}
	}
	// Retry-After itself, unless a dry run serves the request.
	if want := member + ";r=0;t=" + strconv.FormatInt(max(1, ceilSeconds(d.Result.RetryAfter)), 10); got != want {
		t.Errorf("%s: RateLimit %q: member %q, want %q", name, h.Get("RateLimit"), got, want)
	}
	if got := h.Get("X-RateLimit-Limit"); got != limit {
		t.Errorf("%s: X-RateLimit-Limit %q, want %q (the refusing layer's)", name, got, limit)
	}
}

type ctxKey struct{}

// TestDecisionContext: the Observer gets the request's context (for its
// trace), and a Decision made by hand a background one, never nil.
// Guards: Context's godoc.
func TestDecisionContext(t *testing.T) {
	_, _, l := mini(t)
	var obs observed
	p := mustNew(t, Config{Limiter: l, Observers: []Observer{&obs}})
	r := from("192.0.2.1")
	r.ctx = context.WithValue(t.Context(), ctxKey{}, "the request's")
	p.testDecide(r)
	if got := obs.decisions[0].context().Value(ctxKey{}); got != "the request's" {
		t.Errorf("the Observer's Decision.Context() carries %v, want the request's context", got)
	}
	if ctx := (&Decision{}).context(); ctx == nil {
		t.Error("a Decision made by hand has a nil Context")
	}
}
