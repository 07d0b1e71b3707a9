package httplimit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/keyspace"
)

// Config is the rate limit of an HTTP route or app, shared by every
// adapter. New checks it and compiles it into a Policy; the adapters take
// the Policy. Only Limiter is required.
type Config struct {
	// Limiter decides, in Redis. Required.
	Limiter *core.Limiter

	// Limit applies to every request, unless LimitFunc chooses another.
	// Default: 10 per second per key (core.PerSecond(10)).
	Limit core.Limit

	// LimitFunc chooses the Limit per request (a tenant's tier, an
	// override read with core.Overrides); its second result false means
	// "use Limit". It runs only for a request that was keyed, and gets the
	// key Key returned: when Key verifies what the client claims (an API
	// key, a tenant), LimitFunc sees only verified ones. A key keeps one
	// state per algorithm whatever the Rate, Period or Burst it is decided
	// under, as after a change of its Limit: that is what tiers need (tiers
	// of different algorithms are different states, each with its own
	// quota). For routes with limits of their own,
	// give them keys of their own (KeyJoin with KeyByRoute), or one Policy
	// each, with its own Name. Default: none.
	LimitFunc func(r Request, key string) (core.Limit, bool)

	// Layers are further limits on the same key, decided atomically with
	// Limit in one round trip (Limit 10 per second, Layers 1000 per hour):
	// a request is admitted only if all admit, and takes from all. At most
	// 7 with Scopes and InFlight. The X-RateLimit headers report the
	// strictest; the IETF fields list every layer. Default: none.
	Layers []core.Limit

	// Scopes are further keys a request counts against, beside its own:
	// its team, its organisation, the whole API. The request is decided
	// under its key's Limit, Layers and InFlight permit and every Scope's
	// Limit at once, all or nothing (see core.Rule): admitted only if all
	// admit, and then counted in all; refused, counted in none. At most 8
	// Limits in all (the Limit, Layers, Scopes and InFlight). Default: none.
	Scopes []Scope

	// InFlight, if above 0, is how many requests of a key may be in flight
	// at once across every instance that shares the Redis: a request takes
	// a permit with its rate layers, atomically, and gives it back when
	// the handler returns. One refused for it gets 429 with Retry-After (a
	// second at most: a request in flight may end at any moment) and the
	// Outcome OutcomeInFlight. Default: 0, no limit.
	InFlight int

	// InFlightLease is how long a permit outlives a process that died
	// holding it (a crash, a lost connection): it lapses this long after
	// it was taken or last renewed, and the Policy renews it every half of
	// this while the handler runs. A permit that cannot be kept is lost:
	// the handler's context is cancelled with the cause ErrPermitLost, so
	// that while Redis answers no more than InFlight handlers of a key run
	// at once, provided they stop when their context ends. Renewals under
	// faults and either fail policy: docs/http.md#requests-in-flight.
	// Default: 10s.
	InFlightLease time.Duration

	// Name namespaces the keys and names the IETF policy: 1 to 64 letters,
	// digits, '-', '_' or '.', so that Policies of different Names never
	// share counters (TestPolicyNamesCannotCollide). Default: "http".
	Name string

	// Key chooses what a request is limited by. Default: the client IP,
	// the address of the peer (KeyByIP with the zero ClientIP).
	Key KeyFunc

	// ServeUnkeyed serves a request Key cannot key (a
	// missing header, no route, no peer address) without any limit. By
	// default such a request is refused with 400 and
	// {"error":"missing rate limit key"}: otherwise leaving the key out
	// would be a way around the limit. Turn it on only where every request
	// that matters has a key. Default: false.
	ServeUnkeyed bool

	// Cost says how many units a request costs (its size, say). A cost
	// below 1 or above the Limit's capacity can never be admitted and is
	// refused with 503, even when failing open. Default: 1.
	Cost func(Request) int

	// CountIf, if set, counts only the requests whose response status it
	// reports true for: status >= 400 counts failed logins, so a brute
	// force is limited and users who log in are not. A request still needs a unit
	// free to proceed, and takes it; when the handler's status does not
	// count, the unit is given back (Limiter.Refund). So concurrent
	// requests never pass beyond the limit: the only error is on the strict
	// side, a request in flight holding its unit until it ends, and a
	// request that ends after its unit's window (or after its bucket would
	// have refilled the unit anyway) gives nothing back. Default: every
	// request counts.
	CountIf func(status int) bool

	// Settle lets a handler report what its request really cost. Once that
	// is known (the tokens of an LLM completion, the bytes streamed) the
	// handler calls Policy.ReportCost; when it returns, the Policy settles
	// the difference with Limiter.Settle, giving back what the request did
	// not use, or charging the excess as a debt that later requests of the
	// key wait out at the Limit's rate. A report of any
	// size is charged: one beyond the deepest debt a Limit holds leaves
	// the key at that debt (see core.Limiter.Settle), never free. The
	// request still takes its Cost first, to be admitted at all. Default:
	// false.
	Settle bool

	// Headers are the rate-limit response fields, a list of styles.
	// Default (nil): Headers{XRateLimit{}}. An empty Headers{} sends none;
	// refused requests still carry Retry-After. The local fallback's
	// decisions (core.Result.Fallback) carry none: its Remaining is this
	// instance's share, not the key's.
	Headers Headers

	// FailClosed answers 503 with Retry-After: 1 when Redis did not decide
	// a request. Redis failed, timed out, or the circuit was open; by
	// default the Limiter's local fallback decides (each instance its share
	// of the limit; no limit only under core.WithLocalFallback(0, 0)). Any
	// other error is refused with 503 either way: a cost or Limit that can
	// never pass, or a closed Limiter. Default: false.
	FailClosed bool

	// DryRun decides, counts and sends headers but never refuses nor
	// delays a request, not even one it cannot key or when failing closed:
	// for rolling a limit out safely. The Observer still sees each outcome.
	// Default: false.
	DryRun bool

	// MaxWait caps how long a core.LeakyBucket request is held before it
	// proceeds; one that would wait longer is denied without using
	// capacity. It only ever lowers a Limit's own MaxDelay. Default (0): the
	// Limit's MaxDelay, or when that is 0 too the time a full queue takes
	// to drain (Burst × Period / Rate: Period when Burst is Rate).
	MaxWait time.Duration

	// Observers are told of every decision, in order (for metrics:
	// prommetrics and otelmetrics, say). Default: none.
	Observers []Observer
}

// Scope is a further key a request counts against (Config.Scopes).
type Scope struct {
	// Name names the Scope in the IETF fields (a member "<policy>-<name>"),
	// in Decision.RefusedBy and in the metrics: letters, digits, '-' and
	// '_', at most 32, unique in the Policy ("org", "global"). Required.
	Name string
	// Key chooses the Scope's key for a request, as Config.Key does for
	// the request's own: an organisation's ID, say. A request it cannot
	// key is refused with 400, even under ServeUnkeyed (a client would
	// drop the Scope's header to escape it). Its keys are the Scope's own:
	// "acme" of the Scope "org" never meets "acme" of another Scope or of
	// Config.Key. nil: one key for every request, a ceiling on the whole
	// Policy. On a Redis Cluster the request is one atomic call only when
	// every key shares a hash tag ("{acme}" here, "{acme}:user:42" for
	// Config.Key); else it takes a round trip per slot, the request's own
	// first (docs/operations.md#operations).
	Key KeyFunc
	// Limit is the Scope's: core.PerSecond(5000) for the whole API, say.
	// Required.
	Limit core.Limit
}

// defaultLimit is Config.Limit's default.
var defaultLimit = core.PerSecond(10)

// New checks cfg and compiles it into a Policy, with an error that names
// the field it cannot use.
func New(cfg Config) (*Policy, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("httplimit: Config.Limiter is nil")
	}
	p := &Policy{
		limiter: cfg.Limiter, limit: cfg.Limit, limitFunc: cfg.LimitFunc, name: cfg.Name, key: cfg.Key,
		serveUnkeyed: cfg.ServeUnkeyed, cost: cfg.Cost, countIf: cfg.CountIf, settle: cfg.Settle, headers: cfg.Headers,
		failClosed: cfg.FailClosed, dryRun: cfg.DryRun, maxWait: cfg.MaxWait, observers: cfg.Observers,
	}
	if p.maxWait < 0 {
		return nil, fmt.Errorf("httplimit: Config.MaxWait must be >= 0, got %v", p.maxWait)
	}
	if err := p.limitsOf(cfg); err != nil {
		return nil, err
	}
	if err := errors.Join(p.scopesOf(cfg.Scopes), checkObservers(cfg.Observers), p.headersOf()); err != nil {
		return nil, err
	}
	if p.name == "" {
		p.name = "http"
	}
	if err := keyspace.ValidName(p.name); err != nil {
		return nil, fmt.Errorf("httplimit: Config.Name: %w", err)
	}
	if p.key == nil {
		p.key = defaultKey
	}
	p.quotedName = strconv.Quote(strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, p.name))
	p.noRoute = new(atomic.Bool)
	p.losses = new(lossLog)
	return p, nil
}

// limitsOf checks the key's own Limits (Config.Limit, Layers, InFlight
// and InFlightLease) and compiles them into p.
func (p *Policy) limitsOf(cfg Config) error {
	if p.limit == (core.Limit{}) {
		p.limit = defaultLimit
	}
	if err := p.limit.Validate(); err != nil {
		return fmt.Errorf("httplimit: Config.Limit: %w", err)
	}
	if most := 7 - min(1, max(0, cfg.InFlight)) - len(cfg.Scopes); len(cfg.Layers) > most {
		return fmt.Errorf("httplimit: Config.Layers and Config.Scopes: at most %d Limits beside Config.Limit and InFlight, got %d", 7-min(1, max(0, cfg.InFlight)), len(cfg.Layers)+len(cfg.Scopes))
	}
	for i, l := range cfg.Layers {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("httplimit: Config.Layers[%d]: %w", i, err)
		}
		p.layers = append(p.layers, p.capWait(l))
	}
	switch {
	case cfg.InFlight < 0:
		return fmt.Errorf("httplimit: Config.InFlight must be >= 0, got %d", cfg.InFlight)
	case cfg.InFlightLease < 0:
		return fmt.Errorf("httplimit: Config.InFlightLease must be >= 0, got %v", cfg.InFlightLease)
	case cfg.InFlight > 0:
		p.inflight = core.InFlight(cfg.InFlight)
		if cfg.InFlightLease > 0 {
			p.inflight.Period = cfg.InFlightLease
		}
		if err := p.inflight.Validate(); err != nil {
			return fmt.Errorf("httplimit: Config.InFlight: %w", err)
		}
	}
	return nil
}

// headersOf checks Config.Headers and compiles a copy of them into p: the
// caller's slice may change after New.
func (p *Policy) headersOf() error {
	if p.headers == nil {
		p.headers = Headers{XRateLimit{}}
	}
	p.headers = slices.Clone(p.headers)
	for i, h := range p.headers {
		switch h := h.(type) {
		case nil:
			return fmt.Errorf("httplimit: Config.Headers[%d] is nil", i)
		case XRateLimit:
			p.headers[i] = h.canonical()
		case OpenAI:
			f, err := h.fields()
			if err != nil {
				return err
			}
			p.headers[i] = f
		}
	}
	return nil
}

// scopesOf checks the Scopes and compiles them into p.
func (p *Policy) scopesOf(scopes []Scope) error {
	for i, sc := range scopes {
		switch {
		case !validScopeName(sc.Name):
			return fmt.Errorf("httplimit: Config.Scopes[%d].Name %q: want 1 to 32 letters, digits, '-' or '_'", i, sc.Name)
		case slices.ContainsFunc(scopes[:i], func(o Scope) bool { return o.Name == sc.Name }):
			return fmt.Errorf("httplimit: Config.Scopes[%d].Name %q is used twice", i, sc.Name)
		}
		if err := sc.Limit.Validate(); err != nil {
			return fmt.Errorf("httplimit: Config.Scopes[%d] (%s).Limit: %w", i, sc.Name, err)
		}
		sc.Limit = p.capWait(sc.Limit)
		p.scopes = append(p.scopes, sc)
	}
	return nil
}

// validScopeName reports whether name is fit for a header member's name
// and a metric label, and cannot be taken for a layer's ("1") or the
// permit's.
func validScopeName(name string) bool {
	if name == "" || len(name) > 32 || name == "inflight" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// defaultKey is the client IP: the peer's address, IPv6 by /64.
var defaultKey = func() KeyFunc {
	k, _ := KeyByIP(ClientIP{}) // the zero ClientIP is always valid
	return k
}()

// capWait applies MaxWait to a LeakyBucket limit: it only ever lowers
// the Limit's own MaxDelay.
func (p *Policy) capWait(l core.Limit) core.Limit {
	if !shapeOf(l.Algorithm).queues {
		return l
	}
	limit := p.maxWait
	if limit == 0 && l.MaxDelay == 0 && l.Rate > 0 {
		// The time a full queue takes to drain: Period when Burst == Rate.
		limit = time.Duration(float64(l.Period) * float64(l.Capacity()) / float64(l.Rate))
	}
	if limit > 0 && (l.MaxDelay == 0 || limit < l.MaxDelay) {
		l.MaxDelay = limit
	}
	return l
}
