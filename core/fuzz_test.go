package core

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

// The fuzz targets below run their f.Add seeds as ordinary tests (go test
// ./core/), and explore further under go test -fuzz=FuzzX ./core/.

// keySeeds are keys an attacker would try: hash-tag injection, the escape
// characters themselves, the hash form, NUL, invalid UTF-8, and lengths
// around maxTagLen.
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
	strings.Repeat("a", maxTagLen),
	strings.Repeat("a", maxTagLen+1),
	strings.Repeat("{", maxTagLen),
	strings.Repeat("}", maxTagLen+1),
	strings.Repeat("%", maxTagLen),
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

// unescapeTag inverts escapeTag for keys of at most maxTagLen bytes; ok is
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

// checkRedisKey checks everything the Redis keys built from (prefix, key,
// a) must satisfy, and returns the first.
func checkRedisKey(t *testing.T, prefix, key string, a Algorithm) string {
	t.Helper()
	tag := escapeTag(key)
	// A key with a hash tag of its own is in the slot of that tag: its
	// escaped form is "<tag>}{<key>", each part escaped.
	hashed, escaped := tag, tag
	own, hasOwn := hashTag(key)
	if hasOwn {
		var ok bool
		if hashed, escaped, ok = strings.Cut(tag, "}{"); !ok {
			t.Fatalf("escapeTag(%q) = %q, want the escaped hash tag %q, then \"}{\" and the escaped key", key, tag, own)
		}
		checkTagPart(t, key, own, hashed)
	}
	rks := stateKeys(nil, prefix, tag, &algorithms[a], 0)
	for i, rk := range rks {
		if want := len(prefix) + 2 + len(tag) + 1 + len(algorithms[a].suffixes[i]); len(rk) != want {
			t.Fatalf("state key %d of (%q, %q, %v) = %q, %d bytes, want %d", i, prefix, key, a, rk, len(rk), want)
		}
		if got, ok := hashTag(rk); !ok || got != hashed {
			t.Fatalf("state key %q: hash tag %q (found %v), want %q", rk, got, ok, hashed)
		}
		if got, want := keySlot(rk), slot(slotTag(tag)); got != want {
			t.Fatalf("state key %q: slot %d, but batches group it in %d", rk, got, want)
		}
	}
	checkTagPart(t, key, key, escaped)
	return rks[0]
}

// checkTagPart checks that part is escapeTag's form of raw, a part of key
// (its hash tag, or all of it): no brace, never empty, at most maxTagLen
// bytes, and decoding to raw, or raw's hash when raw is too long.
func checkTagPart(t *testing.T, key, raw, part string) {
	t.Helper()
	if strings.ContainsAny(part, "{}") {
		t.Fatalf("escapeTag(%q): %q contains a brace", key, part)
	}
	if part == "" {
		t.Fatalf("escapeTag(%q): %q is empty: Redis Cluster would hash the whole key", key, part)
	}
	if len(part) > maxTagLen {
		t.Fatalf("escapeTag(%q): %q is %d bytes, want <= %d", key, part, len(part), maxTagLen)
	}
	if strings.HasPrefix(part, "#") {
		sum := sha256.Sum256([]byte(raw))
		if want := "#" + base64.RawURLEncoding.EncodeToString(sum[:]); part != want {
			t.Fatalf("escapeTag(%q): the %d-byte %q = %q, want its hash %q", key, len(raw), raw, part, want)
		}
		return
	}
	if got, ok := unescapeTag(part); !ok || got != raw {
		t.Fatalf("escapeTag(%q): %q = %q, which decodes to %q (ok %v): not injective", key, raw, part, got, ok)
	}
}

// limiterPrefix is the prefix a Limiter made WithPrefix(p) uses.
func limiterPrefix(p string) string {
	var c config
	WithPrefix(p)(&c)
	return c.prefix
}

func FuzzRedisKey(f *testing.F) {
	for i, k := range keySeeds {
		prefix := "ratelimit"
		switch i % 3 {
		case 1:
			prefix = "app{1}"
		case 2:
			prefix = ""
		}
		f.Add(prefix, k, uint8(i%len(algorithms)))
	}
	f.Fuzz(func(t *testing.T, prefix, key string, alg uint8) {
		if key == "" {
			return // the Limiter refuses it with ErrEmptyKey before building a key
		}
		a := Algorithm(alg % uint8(len(algorithms)))
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
	f.Add("#"+strings.Repeat("A", 43), strings.Repeat("a", maxTagLen+1))
	f.Add(strings.Repeat("a", maxTagLen), strings.Repeat("a", maxTagLen+1))
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" {
			return // refused with ErrEmptyKey
		}
		for alg := range len(algorithms) {
			ka := checkRedisKey(t, "ratelimit", a, Algorithm(alg))
			kb := checkRedisKey(t, "ratelimit", b, Algorithm(alg))
			if (a == b) != (ka == kb) {
				t.Fatalf("keys %q and %q (equal: %v) give Redis keys %q and %q (equal: %v)", a, b, a == b, ka, kb, ka == kb)
			}
		}
		// Different algorithms never share state.
		if a == b && checkRedisKey(t, "ratelimit", a, TokenBucket) == checkRedisKey(t, "ratelimit", b, SlidingWindow) {
			t.Fatalf("key %q: TokenBucket and SlidingWindow share a Redis key", a)
		}
	})
}
