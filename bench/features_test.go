package bench

import (
	"context"

	"github.com/redlimit/redlimit/core"
)

// The features section measures what a request costs Redis under each
// feature beyond a plain rate decision, with the token bucket beside it:
// an in-flight permit taken and given back (two calls per request), a
// reservation of 1 settled at 3 (two calls), and a calendar month (one
// call; the client sends the window's bounds). A Transport decides as
// AllowN does, and gRPC and HTTP as the Policy does, so they cost what the
// token bucket row costs.

// feature is one request's work under a feature, on a Limiter.
type feature struct {
	name  string
	calls int // script calls per request
	limit func(q quota) core.Limit
	do    func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error)
}

var features = []feature{
	{"token bucket (reference)", 1, func(q quota) core.Limit {
		return core.Limit{Rate: q.rate, Period: q.period}
	}, allowOnce},
	{"in flight: take a permit, give it back", 2, func(q quota) core.Limit { return core.InFlight(min(q.rate, 1<<20)) },
		func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error) {
			r, err := l.Allow(ctx, key, lim)
			if err != nil || !r.Allowed {
				return false, err
			}
			return true, l.Refund(ctx, key, lim, r)
		}},
	{"settle: reserve 1, settle at 3", 2, func(q quota) core.Limit {
		return core.Limit{Rate: q.rate, Period: q.period}
	}, func(ctx context.Context, l *core.Limiter, key string, lim core.Limit) (bool, error) {
		r, err := l.Allow(ctx, key, lim)
		if err != nil || !r.Allowed {
			return false, err
		}
		_, err = l.Settle(ctx, key, lim, r, 3)
		return true, err
	}},
	{"calendar month", 1, func(q quota) core.Limit { return core.PerMonth(q.rate, nil) }, allowOnce},
}

func featureImpl(f feature, batched bool) impl {
	if batched {
		return oursDoing("features/"+f.name+"/batched", "ours-batched", f.limit, f.do)
	}
	return oursDoing("features/"+f.name+"/plain", "ours-plain", f.limit, f.do, core.WithBatching(1))
}

var featureScenarios = []scenario{{1, 10000, allowed}, {16, 10000, allowed}}

func featKey(f feature, s scenario, mode string) string {
	return "features/" + f.name + "/" + s.String() + "/" + mode
}

func (tr *tableRun) measureFeatures(r int) {
	for _, s := range featureScenarios {
		for _, f := range features {
			for _, batched := range rotate([]bool{false, true}, r) {
				im := featureImpl(f, batched)
				mode := "plain"
				if batched {
					mode = "batched"
				}
				tr.put(featKey(f, s, mode), r, cell(tr.t, r, im, s, tr.d))
			}
		}
	}
}

func (tr *tableRun) writeFeatures(w func(string, ...any)) {
	w("\n### Features: what a request costs Redis beyond a rate decision\n\n")
	w("Per request (a decision, and for in flight and settle the call that gives back or settles after it), on 10000 keys at a limit far above the load. ")
	w("*plain* is `WithBatching(1)`; *batched*, the default. A Transport decides as `AllowN` does, and the gRPC and HTTP layers as a Policy does, so they cost what the token bucket costs.\n\n")
	w("| feature | script calls per request | scenario | plain requests/s | plain Redis CPU µs/request | plain script µs/request | batched requests/s | batched Redis CPU µs/request |\n")
	w("|---|--:|---|--:|--:|--:|--:|--:|\n")
	for _, f := range features {
		for _, s := range featureScenarios {
			p, b := tr.get(featKey(f, s, "plain")), tr.get(featKey(f, s, "batched"))
			w("| %s | %d | %s | %s%s | %s%s | %s%s | %s%s | %s%s |\n", f.name, f.calls, s,
				span(p.of(opsPerSec), 0), p.note(errNote), span(p.of(cpuPerOp), 2), p.note((*stats).cpuNote),
				span(p.of(scriptPerOp), 2), p.note((*stats).scriptNote),
				span(b.of(opsPerSec), 0), b.note(errNote), span(b.of(cpuPerOp), 2), b.note((*stats).cpuNote))
		}
	}
}
