package core

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"
)

// The fuzz targets below run their f.Add seeds as ordinary tests (go test
// ./core/), and explore further under go test -fuzz=FuzzX ./core/.

// keySeeds are keys an attacker would try: hash-tag injection, the escape
// characters themselves, the hash form, NUL, invalid UTF-8, and lengths
// around MaxKeyLen.
var keySeeds = []string{
	"user:42",
	"{",
	"}",
	"{}",
	"}{",
	"a{b}c",
	"{evil}",
	"x}{y}",
	"%",
	"%7B",
	"%7b",
	"%25",
	"%%7D",
	"#",
	"#abc",
	"#" + strings.Repeat("A", 43),
	"\x00",
	"a\x00b",
	"\xff\xfe\xfd",
	"é",
	strings.Repeat("a", MaxKeyLen),
	strings.Repeat("a", MaxKeyLen+1),
	strings.Repeat("{", MaxKeyLen),
	strings.Repeat("}", MaxKeyLen+1),
	strings.Repeat("%", MaxKeyLen),
	strings.Repeat("x", 64<<10),
}

// hashTag returns what Redis Cluster hashes for key k: the bytes between
// the first '{' and the next '}', when that is not empty.
func hashTag(k string) (string, bool) {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return k[i+1 : i+1+j], true
}

// unescapeTag inverts escapeTag for keys of at most MaxKeyLen bytes; ok is
// false for a tag escapeTag could not have produced from such a key.
func unescapeTag(tag string) (string, bool) {
	if strings.ContainsAny(tag, "{}#") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(tag); i++ {
		if tag[i] != '%' {
			b.WriteByte(tag[i])
			continue
		}
		if i+2 >= len(tag) {
			return "", false
		}
		switch tag[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		case "23":
			b.WriteByte('#')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// maxTagLen bounds the tag: a key whose escaped form would be longer
// becomes "#" + 43 base64 characters.
const maxTagLen = MaxKeyLen

// checkRedisKey checks everything a Redis key built from (prefix, key, a)
// must satisfy, and returns it.
func checkRedisKey(t *testing.T, prefix, key string, a Algorithm) string {
	t.Helper()
	rk := redisKey(prefix, key, a)
	tag := escapeTag(key)
	if got, ok := hashTag(rk); !ok || got != tag {
		t.Fatalf("redisKey(%q, %q, %v) = %q: hash tag %q (found %v), want the escaped key %q", prefix, key, a, rk, got, ok, tag)
	}
	if strings.ContainsAny(tag, "{}") {
		t.Fatalf("escapeTag(%q) = %q contains a brace", key, tag)
	}
	if tag == "" {
		t.Fatalf("escapeTag(%q) is empty: Redis Cluster would hash the whole key", key)
	}
	if len(tag) > maxTagLen {
		t.Fatalf("escapeTag(%q) is %d bytes, want <= %d", key, len(tag), maxTagLen)
	}
	if want := len(prefix) + 2 + len(tag) + 1 + len(algorithmSuffix[a]); len(rk) != want {
		t.Fatalf("redisKey(%q, %q, %v) = %q, %d bytes, want %d", prefix, key, a, rk, len(rk), want)
	}
	if strings.HasPrefix(tag, "#") {
		sum := sha256.Sum256([]byte(key))
		if want := "#" + base64.RawURLEncoding.EncodeToString(sum[:]); tag != want {
			t.Fatalf("escapeTag of a %d-byte key = %q, want its hash %q", len(key), tag, want)
		}
		return rk
	}
	if got, ok := unescapeTag(tag); !ok || got != key {
		t.Fatalf("escapeTag(%q) = %q, which decodes to %q (ok %v): not injective", key, tag, got, ok)
	}
	return rk
}

// limiterPrefix is the prefix a Limiter made WithPrefix(p) uses.
func limiterPrefix(p string) string {
	var l Limiter
	WithPrefix(p)(&l)
	return l.prefix
}

func FuzzRedisKey(f *testing.F) {
	for i, k := range keySeeds {
		prefix := DefaultPrefix
		switch i % 3 {
		case 1:
			prefix = "app{1}"
		case 2:
			prefix = ""
		}
		f.Add(prefix, k, uint8(i%len(algorithmSuffix)))
	}
	f.Fuzz(func(t *testing.T, prefix, key string, alg uint8) {
		if key == "" {
			return // the Limiter refuses it with ErrEmptyKey before building a key
		}
		a := Algorithm(alg % uint8(len(algorithmSuffix)))
		checkRedisKey(t, limiterPrefix(prefix), key, a)
	})
}

func FuzzRedisKeyInjective(f *testing.F) {
	for i := range keySeeds {
		f.Add(keySeeds[i], keySeeds[(i+1)%len(keySeeds)])
	}
	f.Add("{", "%7B")
	f.Add("}", "%7D")
	f.Add("%", "%25")
	f.Add("#", "%23")
	f.Add("a{b", "a%7Bb")
	f.Add("#"+strings.Repeat("A", 43), strings.Repeat("a", MaxKeyLen+1))
	f.Add(strings.Repeat("a", MaxKeyLen), strings.Repeat("a", MaxKeyLen+1))
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" {
			return // refused with ErrEmptyKey
		}
		for alg := range len(algorithmSuffix) {
			ka := checkRedisKey(t, DefaultPrefix, a, Algorithm(alg))
			kb := checkRedisKey(t, DefaultPrefix, b, Algorithm(alg))
			if (a == b) != (ka == kb) {
				t.Fatalf("keys %q and %q (equal: %v) give Redis keys %q and %q (equal: %v)", a, b, a == b, ka, kb, ka == kb)
			}
		}
		// Different algorithms never share state.
		if a == b && redisKey(DefaultPrefix, a, TokenBucket) == redisKey(DefaultPrefix, b, SlidingWindow) {
			t.Fatalf("key %q: TokenBucket and SlidingWindow share a Redis key", a)
		}
	})
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

func FuzzClientIP(f *testing.F) {
	for i, s := range clientIPSeeds {
		f.Add(s.remote, s.xff, s.fwd, s.real, i*16-8)
	}
	trusted, err := ParseTrustedProxies("10.0.0.0/8", "::1", "fe80::/10")
	if err != nil {
		f.Fatal(err)
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

		for _, c := range []*ClientIP{
			{IPv6Prefix: v6prefix},
			{TrustedProxies: trusted, IPv6Prefix: v6prefix},
		} {
			peer, peerErr := c.Addr(remote, none)
			got, err := c.Addr(remote, headers)
			if (err == nil) != (peerErr == nil) {
				t.Fatalf("Addr(%q): error %v with headers, %v without", remote, err, peerErr)
			}
			key, keyErr := c.Key(remote, headers)
			if (keyErr == nil) != (err == nil) {
				t.Fatalf("Addr(%q) error %v, Key error %v", remote, err, keyErr)
			}
			if err != nil {
				continue
			}
			if !got.IsValid() || got.Zone() != "" || got.Is4In6() {
				t.Fatalf("Addr(%q) = %v: want a valid, unzoned, unmapped address", remote, got)
			}
			if key == "" {
				t.Fatalf("Key(%q) is empty with no error", remote)
			}
			if _, err := netip.ParseAddr(key); err != nil {
				if _, err := netip.ParsePrefix(key); err != nil {
					t.Fatalf("Key(%q) = %q: neither an address nor a prefix", remote, key)
				}
			}
			if !c.trusted(peer) {
				// An untrusted peer's headers must change nothing.
				if got != peer {
					t.Fatalf("untrusted peer %q with X-Forwarded-For %q, Forwarded %q, X-Real-IP %q: Addr = %v, want the peer %v",
						remote, xff, fwd, real, got, peer)
				}
				if want, _ := c.Key(remote, none); key != want {
					t.Fatalf("untrusted peer %q: Key with headers = %q, without = %q", remote, key, want)
				}
			} else if got != peer && xff == "" && fwd == "" && real == "" {
				t.Fatalf("trusted peer %q without forwarding headers: Addr = %v, want the peer %v", remote, got, peer)
			}
		}
	})
}
