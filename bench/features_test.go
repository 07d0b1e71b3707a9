package bench

import (
	"context"

	"github.com/redlimit/redlimit/core"
)

// The features section measures what a request costs Redis under each
// feature beyond a plain rate decision, beside the decision it builds on:
// an in-flight permit taken and given back (two calls per request) and a
// reservation of 1 settled at 3 (two calls) beside a token bucket's
// decision, and a calendar month (one call; the client sends the window's
// bounds) beside a fixed window's. A Transport decides as Allow does, and
// gRPC and HTTP as a Policy does, so they cost what the token bucket costs.

// feature is one request's work under a feature, on a Limiter.
type feature struct {
	id, label string
	ref       string // the id of the feature it is compared with; "" for a reference
	calls     int    // script calls per request
	limit     func(q quota) core.Limit
	do        func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error)
}

func tokenBucket(q quota) core.Limit { return core.Limit{Rate: q.rate, Period: q.period} }

var features = []feature{
	{"tb", "token bucket (reference)", "", 1, tokenBucket, allowOnce},
	{"inflight", "in flight: take a permit, give it back", "tb", 2,
		func(q quota) core.Limit { return core.InFlight(min(q.rate, 1<<20)) },
		func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error) {
			r, err := l.Allow(ctx, 1, lim.For(key))
			if err != nil || !r.Allowed {
				return false, err
			}
			return true, l.Refund(ctx, r)
		}},
	{"settle", "settle: reserve 1, settle at 3", "tb", 2, tokenBucket,
		func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error) {
			r, err := l.Allow(ctx, 1, lim.For(key))
			if err != nil || !r.Allowed {
				return false, err
			}
			_, err = l.Settle(ctx, r, 3)
			return true, err
		}},
	{"fw", "fixed window (reference)", "", 1,
		func(q quota) core.Limit {
			return core.Limit{Algorithm: core.FixedWindow, Rate: q.rate, Period: q.period}
		}, allowOnce},
	{"calendar", "calendar month (a fixed window)", "fw", 1, func(q quota) core.Limit { return core.PerMonth(q.rate, nil) }, allowOnce},
}

func featureImpl(f feature, batched bool) impl {
	if batched {
		return oursDoing("features/"+f.id+"/batched", "ours-batched", f.limit, f.do)
	}
	return oursDoing("features/"+f.id+"/plain", "ours-plain", f.limit, f.do, core.WithBatching(1))
}

var featureScenarios = []scenario{{1, 10000, allowed}, {16, 10000, allowed}}

func featKey(id string, s scenario, batched bool) string {
	return "features/" + id + "/" + s.String() + "/" + modeName(batched)
}

func (tr *tableRun) measureFeatures(r int) {
	for _, s := range featureScenarios {
		for _, f := range features {
			for _, batched := range rotate([]bool{false, true}, r) {
				tr.put(featKey(f.id, s, batched), r, cell(tr.t, r, featureImpl(f, batched), s, tr.d))
			}
		}
	}
}

func (tr *tableRun) writeFeatures(w func(string, ...any)) {
	w("\n### Features: what a request costs Redis beyond a rate decision\n\n")
	w("Per request: a decision, and for in flight and settle the call after it that gives the permit back or settles the cost. ")
	w("10000 keys, a limit far above the load. *plain* is `WithBatching(1)`; *batched*, the default. ")
	w("Each ratio is a feature's Redis CPU per request ÷ its reference's (the decision it builds on) in the same round and mode, then min–max. ")
	w("A Transport decides as `Allow` does, and the gRPC and HTTP layers as a Policy does, so they cost what the token bucket costs.\n\n")
	w("| feature | script calls per request | scenario | plain requests/s | plain Redis CPU µs/request | plain ÷ reference | batched requests/s | batched Redis CPU µs/request | batched ÷ reference |\n")
	w("|---|--:|---|--:|--:|--:|--:|--:|--:|\n")
	for _, f := range features {
		for _, s := range featureScenarios {
			p, b := tr.get(featKey(f.id, s, false)), tr.get(featKey(f.id, s, true))
			pr, br := "—", "—"
			if f.ref != "" {
				pr = span(ratio(p, tr.get(featKey(f.ref, s, false)), cpuPerOp), 2)
				br = span(ratio(b, tr.get(featKey(f.ref, s, true)), cpuPerOp), 2)
			}
			w("| %s | %d | %s | %s%s | %s%s | %s | %s%s | %s%s | %s |\n", f.label, f.calls, s,
				span(p.of(opsPerSec), 0), p.note(errNote), span(p.of(cpuPerOp), 2), p.note((*stats).cpuNote), pr,
				span(b.of(opsPerSec), 0), b.note(errNote), span(b.of(cpuPerOp), 2), b.note((*stats).cpuNote), br)
		}
	}
}
