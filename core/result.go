package core

import (
	"errors"
	"fmt"
	"time"
)

// Result is the outcome of one decision. A denial is a Result with Allowed
// false, never an error: errors are for invalid arguments and failures.
//
// A worked example, for a token bucket of 10 per second (Burst 10) that has
// just admitted its 10th request in one instant: Allowed true, Granted 1,
// Remaining 0, RetryAfter 0, ResetAfter 1s (the bucket is full again in one
// second). The 11th request in that instant gets Allowed false, Granted 0,
// Remaining 0, RetryAfter 100ms (one token takes a tenth of a second to
// refill), ResetAfter 1s.
type Result struct {
	// Allowed reports whether the request may proceed (after Delay). For
	// Peek, whether it would.
	Allowed bool
	// Granted is how many units were taken: n when AllowN admits, between 1
	// and n when AllowAtMost does, 0 on a denial and for Peek.
	Granted int
	// Remaining is how many units could still be taken right now, after
	// this request. 0 <= Remaining <= the Limit's Capacity.
	Remaining int
	// RetryAfter is 0 when Allowed, else the exact wait until the same
	// request could be admitted (for AllowAtMost, one unit), assuming no
	// other traffic.
	RetryAfter time.Duration
	// ResetAfter is how long until the quota is whole again (Remaining ==
	// Capacity), assuming no other traffic.
	ResetAfter time.Duration
	// Delay is how long an admitted LeakyBucket request must wait before it
	// proceeds, so that requests leave at an even pace. 0 otherwise.
	Delay time.Duration
	// Cached reports a denial answered by this instance's deny cache
	// (WithDenyCache) without asking Redis.
	Cached bool
	// Fallback reports a decision made in process (WithLocalFallback)
	// because Redis could not answer.
	Fallback bool
	// Leased reports a decision made through this instance's lease of the
	// key's quota (WithLeases): Redis was asked only if the lease had run
	// out. Remaining is then what Redis had left when the lease was taken,
	// plus the lease's own units.
	Leased bool
}

// errBadReply is returned when Redis answers with something the scripts
// never send (a proxy in the way, or a script of another version).
var errBadReply = errors.New("core: unexpected reply from redis")

// parseResults turns the reply of a script into Results, five integers per
// result. It checks every type, so a changed script or a proxy yields an
// error, never a panic.
func parseResults(vals []any, out []Result) error {
	if len(vals) != 5*len(out) {
		return fmt.Errorf("%w: want %d integers, got %d", errBadReply, 5*len(out), len(vals))
	}
	for i := range out {
		var ints [5]int64
		for j := range ints {
			v, ok := vals[5*i+j].(int64)
			if !ok {
				return fmt.Errorf("%w: element %d is %T, want int64", errBadReply, 5*i+j, vals[5*i+j])
			}
			ints[j] = v
		}
		out[i] = Result{
			Allowed:    ints[0] > 0,
			Granted:    int(ints[0]),
			Remaining:  int(ints[1]),
			RetryAfter: time.Duration(ints[2]) * time.Microsecond,
			ResetAfter: time.Duration(ints[3]) * time.Microsecond,
			Delay:      time.Duration(ints[4]) * time.Microsecond,
		}
	}
	return nil
}
