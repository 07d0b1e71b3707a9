package httplimit

import (
	"testing"

	"github.com/redlimit/redlimit/core"
)

// TestScopeUnkeyedRefusedEvenServingUnkeyed backs Scope.Key's "refused
// with 400 ... even under ServeUnkeyed": a client that leaves out the
// header a Scope is keyed by must not be served without its own key's
// limit too. Without the d.Key check in Proceed, the request is served
// unlimited.
func TestScopeUnkeyedRefusedEvenServingUnkeyed(t *testing.T) {
	_, _, l := mini(t)
	p := mustNew(t, Config{Limiter: l, Limit: core.PerHour(1), ServeUnkeyed: true,
		Scopes: []Scope{{Name: "org", Key: KeyByHeader("X-Org"), Limit: core.PerHour(100)}}})
	if d, _ := decide(p, from("192.0.2.1", "X-Org", "acme")); d.Outcome != OutcomeAllowed {
		t.Fatalf("with its org: %v (%v), want allowed", d.Outcome, d.Err)
	}
	for range 3 {
		d, _ := decide(p, from("192.0.2.1"))
		if d.Outcome != OutcomeNoKey || d.Proceed() || d.Status() != 400 {
			t.Errorf("without its org: %v, proceed %v, status %d; want refused as unkeyed", d.Outcome, d.Proceed(), d.Status())
		}
	}
	// The request's own key missing is still served, as ServeUnkeyed says.
	np := mustNew(t, Config{Limiter: l, Key: KeyByHeader("X-User"), ServeUnkeyed: true,
		Scopes: []Scope{{Name: "org", Key: KeyByHeader("X-Org"), Limit: core.PerHour(100)}}})
	if d, _ := decide(np, from("192.0.2.1", "X-Org", "acme")); d.Outcome != OutcomeNoKey || !d.Proceed() {
		t.Errorf("no user key: %v, proceed %v; want served unkeyed", d.Outcome, d.Proceed())
	}
}

// TestScopeKeysApart: a Scope's keys are its own, so "acme" as the
// request's key, as an org and as a team are three states, and a Scope
// without a Key is one state for every request.
func TestScopeKeysApart(t *testing.T) {
	_, _, l := mini(t)
	one := core.PerHour(1)
	p := mustNew(t, Config{Limiter: l, Limit: one, Key: KeyByHeader("X-Id"), Scopes: []Scope{
		{Name: "org", Key: KeyByHeader("X-Id"), Limit: one},
		{Name: "team", Key: KeyByHeader("X-Id"), Limit: one},
	}})
	if d, _ := decide(p, from("192.0.2.1", "X-Id", "acme")); d.Outcome != OutcomeAllowed {
		t.Fatalf("first request: %v (%v): the three keys of acme share a state", d.Outcome, d.Err)
	}
	d, _ := decide(p, from("192.0.2.1", "X-Id", "acme"))
	if d.Outcome != OutcomeDenied || d.RefusedBy != "0" {
		t.Errorf("second request: %v refused by %q, want denied by the key's own Limit first", d.Outcome, d.RefusedBy)
	}
}
