package core

import (
	"fmt"
	"time"
)

// decideAt decides n units of key at now (µs), without recording, and
// returns the Result and the key's TAT if it is admitted.
func (s *sketch) decideAt(idx [sketchDepth]uint64, sh share, n int, atMost bool, now int64) (Result, int64) {
	tat := max(s.tat(idx), now)
	fits := int((now + sh.tau - tat) / sh.interval) // units that fit now
	r := Result{Fallback: true}
	k := n
	if atMost {
		k = min(n, fits)
	}
	// No sum overflows: now < 2^53, tat <= now + tau and n × interval
	// <= tau <= saturate = 2^60 (n <= most).
	if k >= 1 && k <= fits {
		r.Allowed, r.Granted = true, k
		tat += int64(k) * sh.interval
		fits -= k
	} else {
		need := int64(n)
		if atMost {
			need = 1
		}
		r.RetryAfter = micros(max(1, tat+need*sh.interval-sh.tau-now))
	}
	r.Remaining = max(0, fits)
	r.ResetAfter = micros(tat - now)
	return r, tat
}

// decide answers rq while Redis cannot, from this instance's shares;
// keys are the state keys of rq's layers. Every algorithm has a bounded
// share, so it never gives a decision up to the fail policy.
func (s *sketch) decide(keys []string, rq *request, now time.Time, out []Result) error {
	pl := rq.pl
	shares, idx, err := s.sharesOf(keys, rq)
	if err != nil {
		return err
	}
	var tats [maxRules]int64
	t := now.Sub(s.start).Microseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cells == nil {
		s.cells = make([]int64, sketchDepth*s.width)
	}
	all := true
	k := 0
	for i, ly := range pl.layers {
		if ly.row.ids {
			out[i] = s.permits.decide(keys[k], ly.limit, s.instances.Load(), t)
		} else {
			out[i], tats[i] = s.decideAt(idx[i], shares[i], rq.n, rq.mode == modeAtMost, t)
		}
		k += len(ly.row.suffixes)
		all = all && out[i].Allowed
	}
	if !all {
		untake(rq, &shares, out)
		return nil
	}
	k = 0
	for i, ly := range pl.layers {
		if ly.row.ids {
			s.permits.take(keys[k], rq.id, t+ly.limit.Period.Microseconds())
			out[i].stamp = rq.id
		} else {
			s.raise(idx[i], tats[i])
		}
		k += len(ly.row.suffixes)
	}
	return nil
}

// sharesOf finds each layer's share and cells, and refuses a cost no
// share can ever admit.
func (s *sketch) sharesOf(keys []string, rq *request) (shares [maxRules]share, idx [maxRules][sketchDepth]uint64, err error) {
	pl, k := rq.pl, 0
	for i, ly := range pl.layers {
		key := keys[k]
		k += len(ly.row.suffixes)
		if ly.row.ids {
			shares[i] = share{most: 1} // one permit per request
			continue
		}
		sh, _ := s.shareOf(ly.row, ly.limit)
		if rq.n > sh.most && rq.mode != modeAtMost {
			if len(pl.layers) > 1 {
				return shares, idx, fmt.Errorf("layer %d: %w", i, errOverShare(rq.n, sh))
			}
			return shares, idx, errOverShare(rq.n, sh)
		}
		shares[i], idx[i] = sh, s.index(key)
	}
	return shares, idx, nil
}

// untake reports a refusal on every layer: nothing is taken, so a layer
// that would have admitted reports what is left before it.
func untake(rq *request, shares *[maxRules]share, out []Result) {
	for i, ly := range rq.pl.layers {
		if out[i].Allowed {
			took := rq.n
			if ly.row.ids {
				took = 1
			}
			out[i] = Result{Fallback: true, Allowed: true, Remaining: out[i].Remaining + took,
				ResetAfter: max(0, out[i].ResetAfter-micros(int64(rq.n)*shares[i].interval))}
		}
		out[i].Granted = 0
	}
}
