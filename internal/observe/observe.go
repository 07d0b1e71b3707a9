// Package observe carries, in the context of a call to a core.Limiter,
// who makes it, for the Limiter's observers (core.Limiter.Observe): a
// nethttplimit Transport names its calls, and an httplimit Policy marks
// its own, which it reports to its Observers itself. Package core reads
// it and fills in Observed.
package observe

import (
	"context"
	"log/slog"
)

type key struct{}

// caller is who makes a call.
type caller struct {
	name     string
	byPolicy bool
}

// Named returns ctx naming its calls name (a Transport's Name).
func Named(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, caller{name: name})
}

// ByPolicy returns ctx marking its calls as those of a Policy named name.
func ByPolicy(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, caller{name: name, byPolicy: true})
}

// Of is the name ctx gives its calls, and whether a Policy makes them.
func Of(ctx context.Context) (name string, byPolicy bool) {
	c, _ := ctx.Value(key{}).(caller)
	return c.name, c.byPolicy
}

// Observed reports whether limiter (a *core.Limiter) has observers, so
// that a caller marks its context only when someone reads the mark. Set by
// package core.
var Observed = func(limiter any) bool { return false }

// Algorithms is how many core Algorithms there are, Algorithm(0) to
// Algorithm(Algorithms-1): the metrics cache a series for each, and tests
// walk them all. Set by package core.
var Algorithms int

// Outcomes are the names of httplimit's Outcomes, in order (Outcome(i) is
// Outcomes[i]): httplimit's String, and the label values the metrics
// packages create a series for each of.
var Outcomes = []string{"allowed", "denied", "failed_open", "failed_closed", "canceled", "no_key", "in_flight"}

// Logger is the logger limiter (a *core.Limiter) was made with
// (core.WithLogger), nil when logging is off: the packages built on core
// log through it, so that one setting covers them. Set by package core.
var Logger = func(limiter any) *slog.Logger { return nil }

// Decisions are httplimit's hooks for the metrics packages, for D an
// httplimit.Decision and O a core.Observation, which this package cannot
// name. Set by package httplimit (SetDecisions), read with DecisionsOf.
type Decisions[D, O any] struct {
	// Of is the Decision of o, a call a Limiter made outside any Policy,
	// and whether the call decided an admission (Peek, Refund, Settle and
	// Renew do not): how the metrics count such calls as they count a
	// Policy's decisions.
	Of func(ctx context.Context, o O) (D, bool)
	// Context is the context of the request d decided, for its trace.
	// (d by value: a pointer would move every Observer's Decision to the
	// heap.)
	Context func(d D) context.Context
	// NearLimit reports whether d, admitted, left at most a fifth of its
	// capacity: what the near_limit metrics count.
	NearLimit func(d D) bool
}

var decisions any

// SetDecisions sets the hooks DecisionsOf returns.
func SetDecisions[D, O any](h Decisions[D, O]) { decisions = h }

// DecisionsOf returns the hooks httplimit set.
func DecisionsOf[D, O any]() Decisions[D, O] {
	h, _ := decisions.(Decisions[D, O])
	return h
}

// RedisFault reports whether a Decision's Degraded reason is a failure of
// Redis' (an error, a timeout, an open circuit), not the local fallback
// nor a decision of Redis': what a metric of Redis errors counts.
func RedisFault(degraded string) bool {
	return degraded == "breaker" || degraded == "fail_open" || degraded == "fail_closed"
}
