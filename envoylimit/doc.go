// Package envoylimit serves Envoy's rate limit service on a core.Limiter,
// from envoyproxy/ratelimit's configuration files.
//
// It speaks envoy.service.ratelimit.v3, the protocol of
// envoyproxy/ratelimit, so that Envoy, Istio and services in any language
// share limits with Go services. Every descriptor of a request is decided
// together, all or nothing; hits_addend is the cost; shadow_mode counts and
// never refuses; the configuration reloads when its files change.
// docs/envoy.md has the format, the extensions (algorithm, burst, calendar,
// overdraft), the metrics, how a Go service shares a limit with Envoy, and
// where the answers differ from envoyproxy/ratelimit's; `redlimit serve`
// runs it.
package envoylimit
