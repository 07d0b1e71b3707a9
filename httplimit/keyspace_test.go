package httplimit

import (
	"context"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/inspect"
	"github.com/redlimit/redlimit/internal/keyspace"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestCLIKeysAreHTTPLimitKeys backs cmd/redlimit's promise to address
// what an operator knows: the keys package keyspace forms from an IP, a
// header's value or a Scope's key are the ones a Policy's requests wrote
// state under, found in Redis by the reader the CLI uses.
func TestCLIKeysAreHTTPLimitKeys(t *testing.T) {
	_, rdb := redistest.Mini(t)
	const prefix = "rltest-keyspace"
	l := newLimiter(t, rdb, core.WithPrefix(prefix))
	byIP, err := KeyByIP(ClientIP{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustNew(t, Config{Limiter: l, Key: KeyFirst(KeyByHeader("x-api-key"), byIP), InFlight: 2, Scopes: []Scope{
		{Name: "org", Key: KeyByHeader("X-Org"), Limit: core.PerHour(100)},
		{Name: "global", Limit: core.PerHour(1000)},
	}})
	for _, r := range []testRequest{
		from("192.0.2.9", "X-Org", "acme"),
		from("[2001:db8::1]", "X-Org", "acme"),
		from("192.0.2.9", "X-Api-Key", " k{1}%\t", "X-Org", "acme"),
	} {
		if d := p.testDecide(r); d.Outcome != OutcomeAllowed {
			t.Fatalf("%v: %v (%v)", r, d.Outcome, d.Err)
		}
	}
	ip4, _ := keyspace.ParseIP("192.0.2.9", 64)
	ip6, _ := keyspace.ParseIP("2001:db8::7", 64) // another host of the same /64
	net6, _ := keyspace.ParseIP("2001:db8::/64", 64)
	for _, tt := range []struct{ cli, want string }{
		{keyspace.Policy("http", ip4), "http:ip:192.0.2.9"},
		{keyspace.Policy("http", ip6), "http:ip:2001:db8::/64"},
		{keyspace.Policy("http", net6), "http:ip:2001:db8::/64"},
		{keyspace.Policy("http", keyspace.Header("X-API-KEY", "k{1}%")), "http:h:X-Api-Key:k%7B1%7D%25"},
		{keyspace.Scope("http", "org", keyspace.Header("x-org", "acme")), "http|org:h:X-Org:acme"},
		{keyspace.Scope("http", "global", ""), "http|global"},
	} {
		if tt.cli != tt.want {
			t.Errorf("keyspace formed %q, want %q", tt.cli, tt.want)
		}
		_, states, err := inspect.Read(context.Background(), rdb, prefix, tt.cli)
		if err != nil || len(states) == 0 {
			t.Errorf("%s: states %v, %v; want what the Policy wrote", tt.cli, states, err)
		}
	}
}

// TestPolicyNamesCannotCollide backs Config.Name's "never share counters":
// on names joined to keys with ':' and '|', Policy "a" keyed "b:c" met
// Policy "a:b" keyed "c", and a Policy "p|org" met p's Scope "org".
func TestPolicyNamesCannotCollide(t *testing.T) {
	_, _, l := mini(t)
	for _, name := range []string{"a:b", "p|org", "a b", "{tag}", string(make([]byte, 65))} {
		if p, err := New(Config{Limiter: l, Name: name}); err == nil || p != nil {
			t.Errorf("Name %q: accepted; want an error", name)
		}
	}
	for _, name := range []string{"http", "api.v1", "A-b_c", "x"} {
		if _, err := New(Config{Limiter: l, Name: name}); err != nil {
			t.Errorf("Name %q: %v", name, err)
		}
	}
}
