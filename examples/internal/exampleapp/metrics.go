package exampleapp

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/prommetrics"
)

// newMetrics builds what -metrics adds: the Observer the middleware reports
// every decision to, and the handler of GET /metrics, which serves a
// registry of its own (the decisions, plus Go and process metrics).
func newMetrics() (core.Observer, http.Handler) {
	c := prommetrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return c, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
