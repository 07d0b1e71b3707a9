// Package clock sets a core.Limiter's application clock without adding
// to core's API, for redlimittest and tests that move Redis' clock: core
// fills it in when it is initialised.
package clock

import "time"

var with any

// SetWith sets what With calls: O is core.Option. Set by package core.
func SetWith[O any](f func(now func() time.Time) O) { with = f }

// With returns the core.Option (With[core.Option]) that sets a Limiter's
// application clock, by which it finds calendar windows, so that it
// agrees with a Redis clock a test moves.
func With[O any](now func() time.Time) O { return with.(func(func() time.Time) O)(now) }
