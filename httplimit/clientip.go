package httplimit

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/redlimit/redlimit/internal/keyspace"
)

// ClientIP says how KeyByIP finds the address a request came from.
//
// The zero value is the secure default: the key is the address of the peer
// that opened the connection, and forwarding headers are ignored, because
// anyone can send them. Only when the peer is a trusted proxy is the one
// header that proxy sets read (X-Forwarded-For unless Header says
// otherwise), right to left, skipping trusted hops: the first untrusted hop
// is the client, and everything left of it was written by the client. No
// other header is consulted, since a header the proxy does not set is the
// client's to forge. IPv6 clients are grouped by their /64 (IPv6Prefix),
// since one host usually owns a whole /64.
type ClientIP struct {
	// TrustedProxies are the networks ("10.0.0.0/8") and addresses
	// ("192.0.2.10") of the reverse proxies in front of the app;
	// IPv4-mapped IPv6 forms ("::ffff:10.0.0.0/104") mean their IPv4
	// networks. Default: none, so forwarding headers are never read.
	TrustedProxies []string
	// Header is the forwarding header the trusted proxies set:
	// "X-Forwarded-For", "Forwarded" (RFC 7239, its for= parameters) or a
	// single-address header such as "X-Real-IP". Default: "X-Forwarded-For".
	Header string
	// IPv6Prefix is the prefix length IPv6 clients are grouped by, 1 to
	// 128. Default (0): 64.
	IPv6Prefix int
}

// KeyByIP keys requests by client IP as c finds it. It returns an error
// that names the field for a ClientIP it cannot use; the zero ClientIP is
// always valid. A request whose address cannot be read (a Unix socket, a
// test request without RemoteAddr) cannot be keyed.
func KeyByIP(c ClientIP) (KeyFunc, error) {
	r, err := c.resolver()
	if err != nil {
		return nil, err
	}
	return func(q Request) (string, error) {
		// Every line of the header, right to left (read only from a
		// trusted peer).
		return r.key(q.RemoteAddr(), func(name string) string { return strings.Join(q.Header(name), ",") })
	}, nil
}

// errNoClientIP is returned when neither the peer address nor a trusted
// header holds an IP address.
var errNoClientIP = errors.New("httplimit: no client IP")

// ipResolver is a validated ClientIP.
type ipResolver struct {
	trusted   []netip.Prefix
	header    string
	forwarded bool // header is RFC 7239 Forwarded
	bits      int
}

func (c ClientIP) resolver() (*ipResolver, error) {
	r := &ipResolver{header: c.Header, bits: c.IPv6Prefix}
	if r.header == "" {
		r.header = "X-Forwarded-For"
	}
	if !validHeaderName(r.header) {
		return nil, fmt.Errorf("httplimit: ClientIP.Header %q is not a header name", c.Header)
	}
	r.forwarded = strings.EqualFold(r.header, "Forwarded")
	switch {
	case r.bits == 0:
		r.bits = 64
	case r.bits < 1 || r.bits > 128:
		return nil, fmt.Errorf("httplimit: ClientIP.IPv6Prefix must be 1 to 128 (or 0 for 64), got %d", c.IPv6Prefix)
	}
	for _, s := range c.TrustedProxies {
		p, err := parseTrusted(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		r.trusted = append(r.trusted, p)
	}
	return r, nil
}

// parseTrusted parses a CIDR or an address (taken as /32 or /128), with
// IPv4-mapped forms unmapped: peers are unmapped too, so a mapped network
// would never match one.
func parseTrusted(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, fmt.Errorf("httplimit: ClientIP.TrustedProxies: %q is neither a CIDR nor an IP address", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("httplimit: ClientIP.TrustedProxies: %q covers more than the IPv4-mapped range; write the IPv6 and IPv4 networks apart", s)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		tchar := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !tchar { // RFC 9110: a field name is a token of tchars
			return false
		}
	}
	return true
}

// addr returns the client's address for a request that came from
// remoteAddr ("host:port" or a bare IP), reading the forwarding header
// through header only when the peer is a trusted proxy.
func (r *ipResolver) addr(remoteAddr string, header func(name string) string) (netip.Addr, error) {
	peer, ok := parseHostPort(remoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q", errNoClientIP, remoteAddr)
	}
	if !r.trustedAddr(peer) {
		return peer, nil
	}
	parse := parseHostPort
	if r.forwarded {
		parse = parseForwardedHop
	}
	return r.rightmostUntrusted(peer, header(r.header), parse), nil
}

// key returns the client's address as a key: "ip:<address>" for IPv4,
// "ip:<network>" ("ip:2001:db8::/64") for IPv6.
func (r *ipResolver) key(remoteAddr string, header func(name string) string) (string, error) {
	a, err := r.addr(remoteAddr, header)
	if err != nil {
		return "", err
	}
	return keyspace.IP(a, r.bits), nil
}

func (r *ipResolver) trustedAddr(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// rightmostUntrusted walks a comma-separated list of hops from the nearest
// (rightmost) back, and returns the first hop that is not a trusted proxy:
// everything left of it was written by the client and proves nothing. A
// hop that does not parse stops the walk at the last good address.
func (r *ipResolver) rightmostUntrusted(peer netip.Addr, list string, parse func(string) (netip.Addr, bool)) netip.Addr {
	last := peer
	for list != "" {
		i := strings.LastIndexByte(list, ',')
		hop := list[i+1:]
		list = list[:max(i, 0)]
		a, ok := parse(strings.Trim(strings.TrimSpace(hop), `"`))
		if !ok {
			return last
		}
		if !r.trustedAddr(a) {
			return a
		}
		last = a
	}
	return last
}

// parseForwardedHop reads the for= parameter of one RFC 7239 element:
// for=192.0.2.60;proto=http, for="[2001:db8::1]:4711".
func parseForwardedHop(s string) (netip.Addr, bool) {
	for pair := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "for") {
			return parseHostPort(strings.Trim(v, `"`))
		}
	}
	return netip.Addr{}, false
}

// parseHostPort accepts "ip", "ip:port", "[ipv6]" and "[ipv6]:port", with
// IPv4-mapped IPv6 unmapped, so one client has one key.
func parseHostPort(s string) (netip.Addr, bool) {
	// A peer address has a port, a forwarded one usually not: try the
	// likely form first, since a failed parse allocates its error.
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone(""), true
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}
