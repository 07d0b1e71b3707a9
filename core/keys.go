package core

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// ErrEmptyKey is returned for an empty key: it almost always means the key
// function found nothing, and sharing one limit among all such callers would
// be a surprise.
var ErrEmptyKey = errors.New("core: empty key")

// MaxKeyLen is the longest caller key stored as it is, once escaped.
// Longer keys, which an attacker can send in a header, are replaced by their
// SHA-256, so what reaches Redis stays small.
const MaxKeyLen = 128

// escapeBraces keeps a configured prefix from holding a hash tag.
var escapeBraces = strings.NewReplacer("{", "%7B", "}", "%7D")

// algorithmSuffix keeps the state of different algorithms apart, so a key
// whose Limit switches algorithm never meets a value of the wrong type.
var algorithmSuffix = [...]string{
	TokenBucket:          ":tb",
	SlidingWindow:        ":sw",
	SlidingWindowCounter: ":swc",
	FixedWindow:          ":fw",
	LeakyBucket:          ":lb",
}

// redisKey builds "<prefix>:{<tag>}<suffix>". The braces make the caller's
// key the Redis Cluster hash tag, so every key of one decision (and every
// layer of one caller) lands in one slot; escapeTag guarantees the tag
// itself holds no brace that could end it early or move the slot.
func redisKey(prefix, key string, a Algorithm) string {
	tag := escapeTag(key)
	suffix := algorithmSuffix[a]
	var b strings.Builder
	b.Grow(len(prefix) + len(tag) + len(suffix) + 3)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(tag)
	b.WriteByte('}')
	b.WriteString(suffix)
	return b.String()
}

// escapeTag makes a caller key safe as a hash tag. '%', '{', '}' and '#'
// are percent-encoded; all other bytes (NUL, invalid UTF-8) are kept: Redis
// keys are binary safe. A key whose escaped form is longer than MaxKeyLen
// becomes "#" + base64url(sha256(key)) instead; '#' is escaped in every
// other key, so the two forms cannot collide.
func escapeTag(key string) string {
	if len(key) > MaxKeyLen {
		return hashedTag(key)
	}
	if !strings.ContainsAny(key, "%{}#") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '#':
			b.WriteString("%23")
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() > MaxKeyLen {
		return hashedTag(key)
	}
	return b.String()
}

func hashedTag(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}
