package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/nethttplimit"
)

// TestREADMECommands backs the README's operator lines as written: a
// client the default Policy (Name "http", keyed by IP) has refused is
// found by `-name http inspect <ip>`, `reset <ip>` deletes its state, and
// the client is served again. On keys joined as "<name>:<ip>" the CLI
// found nothing, said "0 state key(s) deleted" and exited 0.
func TestREADMECommands(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	policy, err := httplimit.New(httplimit.Config{Limiter: l, Limit: core.PerMinute(2)})
	if err != nil {
		t.Fatal(err)
	}
	h := nethttplimit.New(policy)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	get := func() int {
		w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.9:4711"
		h.ServeHTTP(w, r)
		return w.Code
	}
	for range 2 {
		get()
	}
	if code := get(); code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", code)
	}
	url := "redis://" + mr.Addr()
	out, errs, code := cli(t, "-redis", url, "-name", "http", "inspect", "203.0.113.9")
	if code != 0 || !strings.Contains(out, "token_bucket layer 0  ratelimit:{http:ip:203.0.113.9}:tb4") {
		t.Errorf("inspect: exit %d\n%s%s; want the client's token bucket", code, out, errs)
	}
	out, errs, code = cli(t, "-redis", url, "reset", "203.0.113.9") // -name http is the default
	if code != 0 || !strings.HasPrefix(out, "http:ip:203.0.113.9: reset, 1 state key(s) deleted\n") {
		t.Errorf("reset: exit %d\n%s%s", code, out, errs)
	}
	if code := get(); code != http.StatusOK {
		t.Errorf("after reset: %d, want 200", code)
	}
	out, _, code = cli(t, "-redis", url, "inspect", "203.0.113.10")
	if code != 1 || !strings.Contains(out, "no state") {
		t.Errorf("inspect of a client never seen: exit %d, %q; want 1 and no state", code, out)
	}
}

// TestAddressShapes: each way of naming a client forms the key httplimit
// forms (TestCLIKeysAreHTTPLimitKeys checks those against a Policy's), and
// what cannot name one is a usage error, exit 2, that says what to give.
func TestAddressShapes(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	url := "redis://" + mr.Addr()
	for _, tt := range []struct {
		args []string
		key  string
	}{
		{[]string{"inspect", "2001:db8::7"}, "http:ip:2001:db8::/64"},
		{[]string{"-ipv6-prefix", "128", "inspect", "2001:db8::7"}, "http:ip:2001:db8::7"},
		{[]string{"-name", "api", "inspect", "::ffff:192.0.2.1"}, "api:ip:192.0.2.1"},
		{[]string{"-header", "x-api-key", "inspect", "k{1}"}, "http:h:X-Api-Key:k%7B1%7D"},
		{[]string{"-key", "inspect", "user:42"}, "http:user:42"},
		{[]string{"-scope", "org", "-header", "X-Org", "inspect", "acme"}, "http|org:h:X-Org:acme"},
		{[]string{"-scope", "global", "inspect"}, "http|global"},
		{[]string{"-core", "inspect", "outbound:api.example.com"}, "outbound:api.example.com"},
	} {
		if _, err := l.Allow(context.Background(), 1, core.PerMinute(5).For(tt.key)); err != nil {
			t.Fatal(err)
		}
		var in inspectOut
		cliJSON(t, &in, append([]string{"-redis", url}, tt.args...)...)
		if in.Key != tt.key || len(in.States) != 1 {
			t.Errorf("%v: key %q, %d states; want %q", tt.args, in.Key, len(in.States), tt.key)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "acme"}, "-header NAME"},
		{[]string{"inspect", "192.0.2.0/24"}, "keyed by its address"},
		{[]string{"-name", "a:b", "inspect", "192.0.2.1"}, "-name"},
		{[]string{"-core", "-scope", "org", "inspect", "k"}, "-core"},
		{[]string{"-header", "X-Key", "inspect", " "}, "blank"},
	} {
		out, errs, code := cli(t, append([]string{"-json", "-redis", url}, tt.args...)...)
		var e errorJSON
		if code != 2 || !strings.Contains(errs, tt.want) || json.Unmarshal([]byte(out), &e) != nil || e.Exit != 2 || !strings.Contains(e.Error, tt.want) {
			t.Errorf("%v: exit %d, %q, %q; want 2, %q, and it as JSON", tt.args, code, out, errs, tt.want)
		}
	}
}

// TestResetKeepsPermits backs reset's report: the permit of a request in
// flight, which Limiter.Reset leaves, is listed as kept, not deleted (it
// was listed as deleted, and the next request was still refused).
func TestResetKeepsPermits(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	const key = "http:ip:192.0.2.1"
	cached, err := core.New(rdb, core.WithLogger(nil), core.WithDenyCache(10))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cached.Close() }()
	for deadline := time.Now().Add(10 * time.Second); len(mr.PubSubNumSub("ratelimit:resets")) == 0 || mr.PubSubNumSub("ratelimit:resets")["ratelimit:resets"] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the Limiter with a deny cache never subscribed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if res, err := l.Allow(context.Background(), 1, core.PerMinute(5).For(key), core.InFlight(1).For(key)); err != nil || !res.Allowed {
		t.Fatal(res, err)
	}
	var out resetJSON
	cliJSON(t, &out, "-redis", "redis://"+mr.Addr(), "reset", "192.0.2.1")
	if fmt.Sprint(out.Deleted) != "[ratelimit:{"+key+"}:tb4]" || len(out.Kept) != 1 || !strings.Contains(out.Kept[0], ":cc3") {
		t.Errorf("reset -json: deleted %v, kept %v; want the bucket deleted and the permit kept", out.Deleted, out.Kept)
	}
	if out.Listening != 1 {
		t.Errorf("reset -json: %d listening instances, want the one with a deny cache", out.Listening)
	}
	if len(out.Kept) == 1 && !mr.Exists(out.Kept[0]) {
		t.Errorf("the permit is gone from Redis")
	}
}
