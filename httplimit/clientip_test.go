package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func mustKeyByIP(t testing.TB, c ClientIP) KeyFunc {
	t.Helper()
	k, err := KeyByIP(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestClientIPKeys(t *testing.T) {
	trusted := ClientIP{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.10", "::ffff:172.16.0.0/108"}}
	for _, tt := range []struct {
		name   string
		c      ClientIP
		remote string
		kv     []string
		want   string
	}{
		{"peer", ClientIP{}, "203.0.113.7:1234", []string{"X-Forwarded-For", "1.2.3.4"}, "ip:203.0.113.7"},
		{"untrusted peer's header ignored", trusted, "203.0.113.7:1234", []string{"X-Forwarded-For", "1.2.3.4"}, "ip:203.0.113.7"},
		{"trusted proxy", trusted, "10.0.0.1:80", []string{"X-Forwarded-For", "1.2.3.4, 10.0.0.2"}, "ip:1.2.3.4"},
		{"rightmost untrusted", trusted, "10.0.0.1:80", []string{"X-Forwarded-For", "6.6.6.6, 1.2.3.4"}, "ip:1.2.3.4"},
		{"single trusted address", trusted, "192.0.2.10:80", []string{"X-Forwarded-For", "1.2.3.4"}, "ip:1.2.3.4"},
		// A 4-in-6 network means its IPv4 network: peers are unmapped.
		{"mapped network", trusted, "172.16.3.4:80", []string{"X-Forwarded-For", "1.2.3.4"}, "ip:1.2.3.4"},
		{"mapped peer", trusted, "[::ffff:10.0.0.1]:80", []string{"X-Forwarded-For", "1.2.3.4"}, "ip:1.2.3.4"},
		{"IPv6 by /64", ClientIP{}, "[2001:db8:1:2:3::9]:443", nil, "ip:2001:db8:1:2::/64"},
		{"IPv6 by /48", ClientIP{IPv6Prefix: 48}, "[2001:db8:1:2:3::9]:443", nil, "ip:2001:db8:1::/48"},
		{"IPv6 whole", ClientIP{IPv6Prefix: 128}, "[2001:db8:1:2:3::9]:443", nil, "ip:2001:db8:1:2:3::9"},
		{"Forwarded", ClientIP{TrustedProxies: []string{"10.0.0.0/8"}, Header: "Forwarded"}, "10.0.0.1:80",
			[]string{"Forwarded", `for="[2001:db8::1]:4711";proto=http`}, "ip:2001:db8::/64"},
		{"X-Real-IP", ClientIP{TrustedProxies: []string{"10.0.0.0/8"}, Header: "X-Real-IP"}, "10.0.0.1:80",
			[]string{"X-Real-IP", "198.51.100.1", "X-Forwarded-For", "1.2.3.4"}, "ip:198.51.100.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustKeyByIP(t, tt.c)(testRequest{remote: tt.remote, header: from("0.0.0.0", tt.kv...).header})
			if err != nil || got != tt.want {
				t.Errorf("key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestClientIPRefused: a ClientIP that cannot be used is an error naming
// its field, at construction: an IPv6Prefix out of range used to become 64
// silently (all of 64:ff9b::/96 then shared one key at /96).
func TestClientIPRefused(t *testing.T) {
	for _, tt := range []struct {
		c    ClientIP
		want string
	}{
		{ClientIP{IPv6Prefix: 129}, "IPv6Prefix"},
		{ClientIP{IPv6Prefix: -1}, "IPv6Prefix"},
		{ClientIP{TrustedProxies: []string{"10.0.0.0/33"}}, "TrustedProxies"},
		{ClientIP{TrustedProxies: []string{"proxy.internal"}}, "TrustedProxies"},
		{ClientIP{TrustedProxies: []string{"::ffff:0:0/90"}}, "TrustedProxies"},
		{ClientIP{Header: "X Forwarded"}, "Header"},
	} {
		if k, err := KeyByIP(tt.c); err == nil || k != nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("KeyByIP(%+v) = %v; want an error naming %s", tt.c, err, tt.want)
		}
	}
}

// clientIPSeeds: remote addresses of every shape, trusted or not.
var clientIPSeeds = []struct{ remote, xff, fwd, real string }{
	{"203.0.113.7:1234", "1.2.3.4", "", ""},
	{"203.0.113.7", "1.2.3.4, 10.0.0.1", "for=5.6.7.8", "9.9.9.9"},
	{"10.0.0.1:80", "1.2.3.4, 10.0.0.2", "", ""},
	{"10.0.0.1:80", "", `for="[2001:db8::1]:4711";proto=http`, ""},
	{"10.0.0.1:80", "", "", "198.51.100.1"},
	{"10.0.0.1:80", "garbage, ,,", "", ""},
	{"10.0.0.1:80", "10.0.0.3, 10.0.0.2", "", ""},
	{"[::1]:8080", "2001:db8::5", "", ""},
	{"[fe80::1%eth0]:80", "1.2.3.4", "", ""},
	{"::ffff:10.0.0.9", "::ffff:1.2.3.4", "", ""},
	{"[2001:db8:1::7]:443", "1.2.3.4", "", ""},
	{"", "1.2.3.4", "", ""},
	{"@", "", "", ""},
	{"/tmp/sock", "1.2.3.4", "", ""},
	{"[", "[", "for=", "["},
	{"10.0.0.1:80", strings.Repeat("1.2.3.4,", 1000), "", ""},
	{"10.0.0.1:80", "\x00\xff", "for=\"\xff\"", "\x00"},
}

// FuzzClientIP: whatever the peer and the headers, the address is valid,
// unzoned and unmapped, and an untrusted peer's headers change nothing.
func FuzzClientIP(f *testing.F) {
	for i, s := range clientIPSeeds {
		f.Add(s.remote, s.xff, s.fwd, s.real, i%130)
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, real string, v6prefix int) {
		headers := func(name string) string {
			switch name {
			case "X-Forwarded-For":
				return xff
			case "Forwarded":
				return fwd
			case "X-Real-IP":
				return real
			}
			return ""
		}
		none := func(string) string { return "" }
		v6prefix = 1 + int(uint(v6prefix)%128)
		for _, c := range []ClientIP{
			{IPv6Prefix: v6prefix},
			{TrustedProxies: []string{"10.0.0.0/8", "::1", "fe80::/10"}, IPv6Prefix: v6prefix},
			{TrustedProxies: []string{"10.0.0.0/8"}, Header: "Forwarded", IPv6Prefix: v6prefix},
			{TrustedProxies: []string{"10.0.0.0/8"}, Header: "X-Real-IP", IPv6Prefix: v6prefix},
		} {
			r, err := c.resolver()
			if err != nil {
				t.Fatal(err)
			}
			peer, peerErr := r.addr(remote, none)
			got, err := r.addr(remote, headers)
			if (err == nil) != (peerErr == nil) {
				t.Fatalf("addr(%q): error %v with headers, %v without", remote, err, peerErr)
			}
			key, keyErr := r.key(remote, headers)
			if (keyErr == nil) != (err == nil) {
				t.Fatalf("addr(%q) error %v, key error %v", remote, err, keyErr)
			}
			if err != nil {
				continue
			}
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("addr(%q) = %v: want a valid, unzoned, unmapped address", remote, got)
			}
			k := strings.TrimPrefix(key, "ip:")
			if _, err := netip.ParseAddr(k); err != nil {
				if _, err := netip.ParsePrefix(k); err != nil {
					t.Fatalf("key(%q) = %q: neither an address nor a prefix", remote, key)
				}
			}
			if !r.trustedAddr(peer) {
				if got != peer {
					t.Fatalf("untrusted peer %q with X-Forwarded-For %q, Forwarded %q, X-Real-IP %q: addr = %v, want the peer %v",
						remote, xff, fwd, real, got, peer)
				}
			} else if got != peer && xff == "" && fwd == "" && real == "" {
				t.Fatalf("trusted peer %q without forwarding headers: addr = %v, want the peer %v", remote, got, peer)
			}
		}
	})
}

// TestClientIPOneKeyPerClient backs issue 17's "a client multiplies
// nothing by how it spells its address": every spelling of one address
// (IPv4-mapped, hex-mapped, upper case, leading zeros in IPv6 groups, a
// zone, with or without a port, padded or quoted in a trusted header),
// and every address of one IPv6 /64, is one key (the default grouping).
func TestClientIPOneKeyPerClient(t *testing.T) {
	for _, group := range []struct {
		bits   int // ClientIP.IPv6Prefix
		want   string
		peers  []string // as the peer address
		hops   []string // as the client hop of a trusted proxy's X-Forwarded-For
		others []string // peers that must not share the key
	}{
		{0, "ip:192.0.2.1",
			[]string{"192.0.2.1:1", "192.0.2.1:65535", "[::ffff:192.0.2.1]:1", "[::FFFF:c000:201]:1", "[0:0:0:0:0:ffff:192.0.2.1]:1", "192.0.2.1"},
			[]string{"192.0.2.1", " 192.0.2.1 ", `"192.0.2.1"`, "::ffff:192.0.2.1", "192.0.2.1:8080", "[::ffff:192.0.2.1]:8080"},
			[]string{"192.0.2.2:1", "[::192.0.2.1]:1", "[64:ff9b::192.0.2.1]:1"}},
		{0, "ip:2001:db8::/64",
			[]string{"[2001:db8::1]:1", "[2001:DB8::1]:1", "[2001:0db8:0000:0000::1]:1", "[2001:db8::1%eth0]:1", "[2001:db8::ffff:ffff:ffff:ffff]:2", "2001:db8::1"},
			[]string{"2001:db8::1", "[2001:DB8::1]", "[2001:db8::1]:4711", " 2001:db8:0::2 "},
			[]string{"[2001:db8:0:1::1]:1"}},
		// Whole addresses: the zone must go by itself, not with the bits a
		// /64 drops.
		{128, "ip:2001:db8::1",
			[]string{"[2001:db8::1]:1", "[2001:db8::1%eth0]:1", "[2001:DB8:0::1%25eth1]:2", "2001:db8::1%eth0"},
			[]string{"2001:db8::1%eth0", "[2001:db8::1%eth0]:4711"},
			[]string{"[2001:db8::2]:1"}},
	} {
		direct := mustKeyByIP(t, ClientIP{IPv6Prefix: group.bits})
		proxied := mustKeyByIP(t, ClientIP{TrustedProxies: []string{"10.0.0.0/8"}, IPv6Prefix: group.bits})
		for _, peer := range group.peers {
			if got, err := direct(testRequest{remote: peer, header: http.Header{}}); err != nil || got != group.want {
				t.Errorf("peer %q: key %q, %v; want %q", peer, got, err, group.want)
			}
		}
		for _, hop := range group.hops {
			h := http.Header{"X-Forwarded-For": {hop + ", 10.0.0.2"}}
			if got, err := proxied(testRequest{remote: "10.0.0.1:80", header: h}); err != nil || got != group.want {
				t.Errorf("forwarded hop %q: key %q, %v; want %q", hop, got, err, group.want)
			}
		}
		for _, peer := range group.others {
			if got, _ := direct(testRequest{remote: peer, header: http.Header{}}); got == group.want {
				t.Errorf("peer %q shares the key %q of another client", peer, got)
			}
		}
	}
}
