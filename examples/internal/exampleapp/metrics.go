package exampleapp

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/httplimit"
	"github.com/redlimit/redlimit/prommetrics"
)

// Metrics is what -metrics adds: the Observers the Policy reports every
// decision to, and the handler of GET /metrics, which serves a registry of
// its own (the decisions, those made on l directly too, the health of l's
// Redis, Go and process metrics). Without -metrics both are nil.
func (a *App) Metrics(l *core.Limiter) ([]httplimit.Observer, http.Handler) {
	if !a.Config.Metrics {
		return nil, nil
	}
	c := prommetrics.New(prommetrics.WithLimiter(l))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return []httplimit.Observer{c}, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
