package core

import (
	"time"

	"github.com/redlimit/redlimit/internal/clock"
)

// The HTTP layer's headers tell time by the Limiter's clock (see package
// internal/clock).
func init() {
	clock.Of = func(limiter any) func() time.Time {
		if l, ok := limiter.(*Limiter); ok && l != nil && l.clock != nil {
			return l.clock
		}
		return time.Now
	}
}
