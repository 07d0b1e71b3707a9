package core

import (
	"sync/atomic"
	"time"
)

// The decisions Redis did not make, as the Limiter logs them.
const (
	degradedFallback = iota // the local fallback decided
	degradedError           // the error went back to the caller
	degradedReasons
)

var degradedNames = [degradedReasons]string{degradedFallback: "fallback", degradedError: "unavailable"}

// degradedLog logs the decisions made without Redis at most once a
// second per reason, with how many there were since the last line: an
// outage is seen at once, without a line per request.
type degradedLog struct {
	now    func() time.Time // time.Now; a test's clock
	last   [degradedReasons]atomic.Int64
	missed [degradedReasons]atomic.Int64
}

func (d *degradedLog) note(l *Limiter, reason int, err error) {
	now := time.Now
	if d.now != nil {
		now = d.now
	}
	t := now().UnixNano()
	last := d.last[reason].Load()
	if t-last < int64(time.Second) || !d.last[reason].CompareAndSwap(last, t) {
		d.missed[reason].Add(1)
		return
	}
	log := l.log()
	if log == nil {
		return
	}
	log.Warn("redlimit: redis did not decide a request", "decided_by", degradedNames[reason],
		"err", err, "since_last_line", d.missed[reason].Swap(0))
}
