package core

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ClientIP finds the address a request came from, for keys by client IP.
//
// It is secure by default: with no TrustedProxies, the key is the address of
// the peer that opened the connection, and forwarding headers are ignored,
// because anyone can send them. Only when the peer is a trusted proxy is
// the one header that proxy sets read (X-Forwarded-For unless Header says
// otherwise), right to left, skipping trusted hops: the first untrusted hop
// is the client, and everything left of it was written by the client. No
// other header is consulted, since a header the proxy does not set is the
// client's to forge. IPv6 clients are grouped by their /64 (IPv6Prefix),
// since one host usually owns a whole /64.
//
// The zero value is ready to use. A ClientIP is safe for concurrent use once
// built.
type ClientIP struct {
	// TrustedProxies are the networks of the reverse proxies in front of the
	// app. Default: none, so forwarding headers are never read.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies set:
	// "X-Forwarded-For", "Forwarded" (RFC 7239, its for= parameters) or a
	// single-address header such as "X-Real-IP". Default: "X-Forwarded-For".
	Header string
	// IPv6Prefix is the prefix length IPv6 clients are grouped by, 1 to 128.
	// Default (0): 64.
	IPv6Prefix int
}

// ParseTrustedProxies parses CIDRs ("10.0.0.0/8") and single addresses
// ("192.0.2.1", taken as /32 or /128) for ClientIP.TrustedProxies.
func ParseTrustedProxies(list ...string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("core: trusted proxy %q is neither a CIDR nor an IP address", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ErrNoClientIP is returned when neither the peer address nor a trusted
// header holds an IP address (a Unix socket, a malformed RemoteAddr).
var ErrNoClientIP = errors.New("core: no client IP")

// Addr returns the client's address for a request that came from remoteAddr
// ("host:port" or a bare IP, as net/http's Request.RemoteAddr), reading the
// forwarding header through header only when the peer is a trusted proxy.
// header must return every line of a header joined with ", " (as
// HeaderValue does): a proxy may add its own line rather than append to the
// client's.
func (c *ClientIP) Addr(remoteAddr string, header func(name string) string) (netip.Addr, error) {
	peer, ok := parseHostPort(remoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: remote address %q", ErrNoClientIP, remoteAddr)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	name := c.Header
	if name == "" {
		name = "X-Forwarded-For"
	}
	parse := parseHostPort
	if strings.EqualFold(name, "Forwarded") {
		parse = parseForwardedHop
	}
	return c.rightmostUntrusted(peer, header(name), parse), nil
}

// Key returns the client's address as a key: the address itself for IPv4,
// its IPv6Prefix network ("2001:db8::/64") for IPv6.
func (c *ClientIP) Key(remoteAddr string, header func(name string) string) (string, error) {
	a, err := c.Addr(remoteAddr, header)
	if err != nil {
		return "", err
	}
	if a.Is4() {
		return a.String(), nil
	}
	bits := c.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	if bits == 128 {
		return a.String(), nil
	}
	p, _ := a.Prefix(bits)
	return p.String(), nil
}

func (c *ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
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
func (c *ClientIP) rightmostUntrusted(peer netip.Addr, list string, parse func(string) (netip.Addr, bool)) netip.Addr {
	last := peer
	for list != "" {
		i := strings.LastIndexByte(list, ',')
		hop := list[i+1:]
		list = list[:max(i, 0)]
		a, ok := parse(strings.Trim(strings.TrimSpace(hop), `"`))
		if !ok {
			return last
		}
		if !c.trusted(a) {
			return a
		}
		last = a
	}
	return last
}

// parseForwardedHop reads the for= parameter of one RFC 7239 element:
// for=192.0.2.60;proto=http, for="[2001:db8::1]:4711".
func parseForwardedHop(s string) (netip.Addr, bool) {
	for _, pair := range strings.Split(s, ";") {
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
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}
