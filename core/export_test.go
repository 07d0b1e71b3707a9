package core

// Waiting is queued, for tests outside the package: they wait on it,
// rather than sleep, to queue concurrent callers in the order they mean.
func Waiting(l *Limiter) int {
	if l.batch == nil {
		return 0
	}
	return queued(l)
}

// WithClock is withClock, for the tests outside the package.
var WithClock = withClock
