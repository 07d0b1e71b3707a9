// Package keyspace forms the keys the HTTP layer (httplimit, nethttplimit)
// gives a core.Limiter, so that the operator's tool (cmd/redlimit) forms
// the same ones from what an operator knows: a client IP, a header's
// value, a Scope's key, a Policy's name. One function per shape, used by
// both sides, so they cannot drift apart (TestCLIKeysAreHTTPLimitKeys in
// httplimit checks each against a real Policy's).
//
// The shapes (docs/operations.md, "How keys are formed"):
//
//	<policy>:<key>                 a Policy's own key, every layer and permit
//	<policy>|<scope>               a Scope without a Key: one ceiling
//	<policy>|<scope>:<key>         a Scope's key
//	ip:<address>, ip:<net>/<bits>  KeyByIP: IPv4, IPv6 by its /64
//	h:<Canonical-Header>:<value>   KeyByHeader
//	route:<pattern>                KeyByRoute
//	<a>|<b>                        KeyJoin
//
// Policy and Scope names hold neither ':' nor '|' (ValidName), so a key
// names one Policy, one Scope and one key: no two of them share a counter.
package keyspace

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// MaxName is the longest Policy name ValidName accepts.
const MaxName = 64

// ValidName returns an error unless name is 1 to MaxName letters, digits,
// '-', '_' or '.': a name that holds ':' or '|' would let one Policy's key
// be another's ("a" keyed "b:c" and "a:b" keyed "c").
func ValidName(name string) error {
	if name == "" || len(name) > MaxName {
		return fmt.Errorf("want 1 to %d characters, got %d", MaxName, len(name))
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("%q is not a letter, digit, '-', '_' or '.'", name[i])
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}

// Policy is the key a Policy (or a Transport) named name gives the Limiter
// for a request its key function keyed key.
func Policy(name, key string) string { return name + ":" + key }

// Scope is the key of the Scope named scope of the Policy named policy:
// key is what the Scope's Key returned, or "" for a Scope without one.
func Scope(policy, scope, key string) string {
	if key == "" {
		return policy + "|" + scope
	}
	return policy + "|" + scope + ":" + key
}

// IP is KeyByIP's key for client address a, IPv6 grouped by its first
// bits (1 to 128).
func IP(a netip.Addr, bits int) string {
	if a.Is4() || bits >= 128 {
		return "ip:" + a.String()
	}
	p, _ := a.Prefix(bits)
	return "ip:" + p.String()
}

// ParseIP is IP for what an operator types: an address ("203.0.113.9",
// "2001:db8::1", IPv4-mapped forms unmapped) or the IPv6 network a key
// names ("2001:db8::/64", which must be that wide).
func ParseIP(s string, bits int) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return IP(a.Unmap().WithZone(""), bits), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "", fmt.Errorf("%q is neither an IP address nor an IPv6 network", s)
	}
	if p.Addr().Is4() || p.Bits() != bits {
		return "", fmt.Errorf("%q: an IPv4 client is keyed by its address, an IPv6 one by its /%d", s, bits)
	}
	return IP(p.Addr(), bits), nil
}

// HeaderPrefix is what KeyByHeader(name)'s keys begin with.
func HeaderPrefix(name string) string { return "h:" + http.CanonicalHeaderKey(name) + ":" }

// Header is KeyByHeader(name)'s key for a request whose header's first
// line is value; "" when value is blank, which keys nothing.
func Header(name, value string) string {
	v := strings.Trim(value, " \t")
	if v == "" {
		return ""
	}
	return HeaderPrefix(name) + NoHashTag(v)
}

// Route is KeyByRoute's key for a route pattern.
func Route(pattern string) string { return "route:" + NoHashTag(pattern) }

// noTag escapes '%', '{' and '}' (so that the escaping stays one to one)
// in what a key function reads from a request: a client's header, or a
// route pattern such as net/http's "/items/{id}", would otherwise be a
// Redis Cluster hash tag (see core.Rule), putting every key that holds it
// in one slot.
var noTag = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// NoHashTag escapes s's '{', '}' and '%'.
func NoHashTag(s string) string {
	if !strings.ContainsAny(s, "{}%") {
		return s
	}
	return noTag.Replace(s)
}
