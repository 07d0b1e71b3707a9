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

// Charge is a Result of rule that took nothing, as a Peek's, without its
// call: Settle of it charges all of used (tests outside the package).
func Charge(rule Rule) Result { return Result{rule: rule} }

// Algorithms lists every Algorithm, in order (TokenBucket first), for the
// tests that walk them all.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(algorithms))
	for i := range out {
		out[i] = Algorithm(i)
	}
	return out
}
