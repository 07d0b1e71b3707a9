package keyspace

import (
	"strings"
	"testing"
)

// TestNamesNeverMeet backs the package doc's "no two of them share a
// counter": with valid names, a Policy's keys and its Scopes' keys, and
// those of other Policies and Scopes, are all different, even when the
// keys themselves hold ':' and '|'.
func TestNamesNeverMeet(t *testing.T) {
	names := []string{"a", "a.b", "p", "org", "http", "x-y_z"}
	keys := []string{"", "b:c", "c", "org", "org:acme", "|org", "a|b", ":"}
	seen := map[string]string{}
	for _, n := range names {
		if err := ValidName(n); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		for _, k := range keys {
			forms := map[string]string{"policy " + n + " key " + k: Policy(n, k)}
			for _, s := range names {
				forms["policy "+n+" scope "+s+" key "+k] = Scope(n, s, k)
			}
			for what, key := range forms {
				if k == "" && strings.HasPrefix(what, "policy "+n+" key") {
					continue // a Policy never keys by ""
				}
				if prev, ok := seen[key]; ok && prev != what {
					t.Errorf("%s and %s share the key %q", prev, what, key)
				}
				seen[key] = what
			}
		}
	}
	for _, bad := range []string{"", "a:b", "p|org", "a b", "{t}", strings.Repeat("x", MaxName+1)} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) = nil, want an error", bad)
		}
	}
}

// TestParseIP: what an operator types is keyed as KeyByIP keys a peer.
func TestParseIP(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"203.0.113.9", "ip:203.0.113.9"},
		{"::ffff:203.0.113.9", "ip:203.0.113.9"},
		{"2001:db8::1", "ip:2001:db8::/64"},
		{"2001:db8::/64", "ip:2001:db8::/64"},
		{"fe80::1%eth0", "ip:fe80::/64"},
	} {
		if got, err := ParseIP(tt.in, 64); err != nil || got != tt.want {
			t.Errorf("ParseIP(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"acme", "192.0.2.0/24", "2001:db8::/48", ""} {
		if got, err := ParseIP(bad, 64); err == nil {
			t.Errorf("ParseIP(%q) = %q, want an error", bad, got)
		}
	}
}
