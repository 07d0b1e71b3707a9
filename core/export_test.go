package core

// Waiting is the number of decisions queued in l's batches: tests outside
// the package wait on it, rather than sleep, to queue concurrent callers
// in the order they mean.
func Waiting(l *Limiter) int {
	if l.batch == nil {
		return 0
	}
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	n := 0
	for _, g := range l.batch.groups {
		n += len(g.queue)
	}
	return n
}
