package core

import "time"

// permits are the Concurrency permits the local fallback handed out: a
// key's share is max(1, floor(Rate/n)) permits in flight at once on this
// instance, so the n instances hold at most n·max(1, floor(Rate/n)) <=
// max(Rate, n) (TestFallbackPermitsBound). A permit goes when its request
// gives it back (Refund, Settle), or lapses after the Limit's Period
// unless renewed, as in Redis. What Redis held when it stopped answering is
// not known here: permits taken before the outage are not counted.
//
// The table holds at most most keys: a new key beyond that is refused,
// never admitted uncounted. s.mu guards it.
type permits struct {
	most int
	keys map[string][]permit // a key's live permits
	ids  map[int64]string    // a live permit's key
}

type permit struct{ id, until int64 }

// live drops key's lapsed permits and returns the rest.
func (p *permits) live(key string, now int64) []permit {
	held := p.keys[key]
	kept := held[:0]
	for _, pm := range held {
		if pm.until > now {
			kept = append(kept, pm)
		} else {
			delete(p.ids, pm.id)
		}
	}
	if len(kept) == 0 {
		delete(p.keys, key)
		return nil
	}
	p.keys[key] = kept
	return kept
}

// decide decides a permit of key under limit at now (µs), without taking it.
func (p *permits) decide(key string, limit Limit, n, now int64) Result {
	share := max(1, int64(limit.Rate)/n)
	held := p.live(key, now)
	r := Result{Fallback: true}
	full := len(held) == 0 && len(p.keys) >= p.most && !p.purge(now)
	if int64(len(held)) < share && !full {
		r.Allowed, r.Granted, r.Remaining = true, 1, int(share)-len(held)-1
		return r
	}
	// As the script says: until the oldest permit lapses, at most a second.
	wait := int64(1e6)
	for _, pm := range held {
		wait = min(wait, pm.until-now)
	}
	r.RetryAfter = micros(max(1, wait))
	return r
}

// purge drops every lapsed permit, and reports whether the table has room.
func (p *permits) purge(now int64) bool {
	for key := range p.keys {
		p.live(key, now)
	}
	return len(p.keys) < p.most
}

// take records a permit that decide admitted.
func (p *permits) take(key string, id, until int64) {
	if p.keys == nil {
		p.keys, p.ids = make(map[string][]permit), make(map[int64]string)
	}
	p.keys[key] = append(p.keys[key], permit{id: id, until: until})
	p.ids[id] = key
}

// settle gives back (renew false) or renews for period µs the permit id
// of key, and reports whether this instance's fallback holds it.
func (p *permits) settle(key string, id int64, renew bool, now, period int64) bool {
	if p.ids[id] != key {
		return false
	}
	held := p.keys[key]
	for i, pm := range held {
		if pm.id != id {
			continue
		}
		if renew {
			held[i].until = now + period
		} else {
			held[i] = held[len(held)-1]
			p.keys[key] = held[:len(held)-1]
			delete(p.ids, id)
		}
		return true
	}
	return false
}

// settle answers a Refund or Renew of a permit this instance's fallback
// handed out, without Redis, which never saw it; false for any other.
func (s *sketch) settle(keys []string, rq *request, now time.Time, out []Result) bool {
	if !rq.pl.ids || len(rq.pl.layers) != 1 || rq.mode != modeRefund && rq.mode != modeRenew {
		return false
	}
	t := now.Sub(s.start).Microseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.permits.live(keys[0], t)
	if !s.permits.settle(keys[0], rq.id, rq.mode == modeRenew, t, rq.pl.layers[0].limit.Period.Microseconds()) {
		return false
	}
	out[0] = Result{Allowed: true, Fallback: true, stamp: rq.id}
	return true
}
