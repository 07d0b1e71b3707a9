package envoylimit

import (
	"math"
	"slices"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// plan checks the request and finds each descriptor's rate_limit. A
// descriptor without one (an unknown domain or descriptor, a limit another
// descriptor replaces) is answered OK without a limit; an unlimited one OK
// with limit_remaining 2^32-1, as envoyproxy/ratelimit answers them. Nor
// does a descriptor with is_negative_hits count: it gives nothing back.
func (s *Server) plan(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, []item, error) {
	if err := check(req); err != nil {
		return nil, nil, err
	}
	descs := req.GetDescriptors()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs))}
	for i := range resp.Statuses {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	d := s.rules.Load().domains[req.GetDomain()]
	if d == nil {
		return resp, nil, nil
	}
	var items []item
	var replaced map[string]bool
	var buf [maxEntries]*node
	for i, desc := range descs {
		entries := desc.GetEntries()
		it := item{desc: i, hits: uint64(max(1, req.GetHitsAddend()))}
		if h := desc.GetHitsAddend(); h != nil {
			it.hits = h.GetValue()
		}
		var path []*node
		if o := desc.GetLimit(); o != nil {
			var err error
			if it.lim, err = override(o); err != nil {
				return nil, nil, status.Error(codes.InvalidArgument, err.Error())
			}
			it.series = s.metrics.overrideSeries(d.name, entries)
		} else if path = d.match(entries, buf[:0]); path != nil {
			it.lim = path[len(path)-1].limit
			it.series = s.metrics.series(d.name, entries, path)
		}
		if it.lim == nil || desc.GetIsNegativeHits() {
			continue
		}
		for _, r := range it.lim.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if it.lim.unlimited {
			resp.Statuses[i].LimitRemaining = math.MaxUint32
			continue
		}
		it.rule = it.lim.rule.For(key(d.name, entries, path))
		items = append(items, it)
	}
	if replaced != nil {
		items = slices.DeleteFunc(items, func(it item) bool { return it.lim.name != "" && replaced[it.lim.name] })
	}
	return resp, items, nil
}

// check refuses a request that is malformed or larger than the bounds.
func check(req *rlsv3.RateLimitRequest) error {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(descs) == 0:
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(descs) > maxDescriptors:
		return status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d in a request", len(descs), maxDescriptors)
	}
	for i, desc := range descs {
		if n := len(desc.GetEntries()); n > maxEntries {
			return status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: at most %d", i, n, maxEntries)
		}
	}
	return nil
}

// answer writes each descriptor's status, the overall code, the metrics
// and, with Config.Headers, the RateLimit fields.
func (s *Server) answer(resp *rlsv3.RateLimitResponse, items []item, admitted bool) {
	if !admitted {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range items {
		it := &items[i]
		if it.same >= 0 {
			it.how, it.res = items[it.same].how, items[it.same].res
		}
		st := resp.Statuses[it.desc]
		over := it.how == refused || it.how == failed || it.how == decided && !it.res.Allowed
		if it.how == decided && !it.res.Allowed && it.res.RetryAfter == 0 {
			it.how, over = unasked, false // a Cluster slot not asked because another refused
		}
		if it.how != unasked {
			st.CurrentLimit = it.lim.current
			if over && !it.lim.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		switch it.how {
		case decided:
			st.LimitRemaining = uint32(min(it.res.Remaining, math.MaxUint32))
			wait := it.res.ResetAfter
			if !it.res.Allowed {
				wait = it.res.RetryAfter
			}
			st.DurationUntilReset = durationpb.New(wait)
		case refused: // no wait lifts it: a window, where envoyproxy/ratelimit says the rest of its own
			st.DurationUntilReset = durationpb.New(it.lim.window)
		}
		s.count(it, over, admitted)
	}
	if s.headers {
		resp.ResponseHeadersToAdd = headers(resp)
	}
}

// count adds a descriptor's hits to its series: over_limit when its
// limit refused (shadow_mode too, for a shadow), within_limit and
// near_limit when its request was admitted. A descriptor of a request
// another refused counts in total_hits alone.
func (s *Server) count(it *item, over, admitted bool) {
	c := it.series
	if c == nil || it.how == failed {
		return
	}
	h := float64(it.hits)
	c.total.Add(h)
	switch {
	case over:
		c.over.Add(h)
		if it.lim.shadow {
			c.shadow.Add(h)
		}
	case it.how == decided && (admitted || it.lim.shadow) && it.res.Granted > 0:
		c.within.Add(h)
		capacity := uint64(it.lim.rule.Capacity())
		near := capacity * 8 / 10 // envoyproxy/ratelimit's NEAR_LIMIT_RATIO
		if used := capacity - uint64(min(it.res.Remaining, int(capacity))); used > near {
			c.near.Add(float64(min(it.hits, used-near)))
		}
	}
}

// headers are the RateLimit fields of the descriptor nearest its limit
// (the last that refused, in a refused request), as envoyproxy/ratelimit
// sends them: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset (whole
// seconds, rounded up).
func headers(resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	const over = rlsv3.RateLimitResponse_OVER_LIMIT
	var best *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.GetStatuses() {
		switch {
		case st.GetCurrentLimit() == nil:
		case st.GetCode() == over, best == nil:
			best = st
		case best.GetCode() != over && st.GetLimitRemaining() < best.GetLimitRemaining():
			best = st
		}
	}
	if best == nil {
		return nil
	}
	reset := best.GetDurationUntilReset().AsDuration()
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(best.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(best.GetLimitRemaining()), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(int64((reset+time.Second-1)/time.Second), 10)},
	}
}
