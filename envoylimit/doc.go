// Package envoylimit serves Envoy's rate limit service protocol
// (envoy.service.ratelimit.v3, the one envoyproxy/ratelimit speaks) on a
// core.Limiter, from envoyproxy/ratelimit's configuration files, so that
// Envoy, Istio and services in any language share limits with Go
// services. Every descriptor of a request is decided together, all or
// nothing; hits_addend is the cost; shadow_mode counts and never refuses;
// the configuration reloads when its files change. docs/envoy.md has the
// format, the extensions (algorithm, burst, calendar), the metrics and how
// a Go service shares a limit with Envoy; `redlimit serve` runs it.
package envoylimit
