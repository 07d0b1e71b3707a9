// Package clock gives the HTTP layer a core.Limiter's clock (core.WithClock)
// without adding to core's API: core fills in Of when it is initialised.
// A Policy's headers tell time by it, so that under redlimittest, whose
// Limiters run on the test's Redis clock, they follow Advance.
package clock

import "time"

// Of returns limiter's clock: a *core.Limiter's WithClock, time.Now by
// default. Set by package core.
var Of = func(limiter any) func() time.Time { return time.Now }
