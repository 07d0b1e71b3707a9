// Package inspect is what package core shows of its Redis state to the
// operator's tool (cmd/redlimit) without adding to core's API: core fills
// in Read and Library when it is initialised, so a program that imports
// core can call them. The key encoding and the state formats stay in core,
// beside the scripts that write them.
package inspect

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// State is one Redis key of a caller's state, decoded.
type State struct {
	// Algorithm is the core.Algorithm's name ("token_bucket").
	Algorithm string
	// Calendar marks a fixed window over calendar days, weeks or months.
	Calendar bool
	// Layer is 0, or n for a key's (n+1)-th Rule in one decision (a
	// further Limit on the key), which keeps a state of its own.
	Layer int
	// Key is the Redis key.
	Key string
	// TTL is the key's time to live; negative when it has none.
	TTL time.Duration
	// Fields are the decoded numbers, in the order the state holds them.
	Fields []Field
	// ResetKeeps marks the permits of requests in flight, which
	// core.Limiter.Reset leaves.
	ResetKeeps bool
}

// Field is one decoded number of a State.
type Field struct {
	// Name says what the number is ("tokens", "count", "window_start").
	Name string
	// Value is in units of the Limit (tokens, requests, permits), or, when
	// Time is set, in microseconds since the Unix epoch.
	Value float64
	Time  bool
}

// Read returns the states Redis holds for key (the key a core.Limiter is
// called with) under prefix (core.WithPrefix; "" is core's default), for
// every algorithm and layer, and Redis' clock when it read them. Set by
// package core.
var Read func(ctx context.Context, rdb redis.UniversalClient, prefix, key string) (now time.Time, states []State, err error)

// OverrideKey is the Redis key of name's override in the core.Overrides
// under prefix ("" is core's default), which holds the Limit's text form.
// Set by package core.
var OverrideKey func(prefix, name string) string

// ResetChannel is the channel Limiters under prefix ("" is core's
// default) hear Resets on. Set by package core.
var ResetChannel func(prefix string) string

// Library is the name of the Redis Functions library this build of core
// loads (FUNCTION LOAD) where the server has functions. Set by package core.
var Library string
