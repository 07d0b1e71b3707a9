// Package httplimit decides, for every redlimit HTTP and gRPC adapter,
// whether a request may proceed and what to answer if not.
//
//	policy, err := httplimit.New(httplimit.Config{
//		Limiter: limiter, // a *core.Limiter, one per Redis client
//		Limit:   core.PerMinute(100),
//	})
//	handler = nethttplimit.New(policy)(handler) // or ginlimit.New(policy), ...
//
// A request is keyed by its client IP unless Config.Key says otherwise; one
// that cannot be keyed gets 400, a denied one 429 with Retry-After. Keys,
// client IPs, responses and Redis faults: see docs/http.md in the repository.
package httplimit
