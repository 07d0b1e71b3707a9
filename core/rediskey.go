package core

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// maxTagLen is the longest caller key stored as it is, once escaped. Longer
// keys, which an attacker can send in a header, are replaced by their
// SHA-256, so what reaches Redis stays small.
const maxTagLen = 128

// escapeBraces keeps a configured prefix from holding a hash tag.
var escapeBraces = strings.NewReplacer("{", "%7B", "}", "%7D")

// stateKeys appends the Redis keys of tag's state under row:
// "<prefix>:{<tag>}<suffix>", with ":<index>" after the suffix for a key's
// Rules after its first in one decision. The braces make the caller's key
// (or the hash tag it chose, see escapeTag) the Redis Cluster hash tag, so
// every key of one caller lands in one slot.
func stateKeys(dst []string, prefix, tag string, row *algorithm, index int) []string {
	var indexSuffix string
	if index > 0 {
		indexSuffix = ":" + strconv.Itoa(index)
	}
	for _, suffix := range row.suffixes {
		var b strings.Builder
		b.Grow(len(prefix) + len(tag) + len(suffix) + len(indexSuffix) + 3)
		b.WriteString(prefix)
		b.WriteString(":{")
		b.WriteString(tag)
		b.WriteByte('}')
		b.WriteString(suffix)
		b.WriteString(indexSuffix)
		dst = append(dst, b.String())
	}
	return dst
}

// escapeTag is a caller key as it stands between the braces of its state
// keys (see stateKeys). A key that holds a hash tag of its own, as Redis
// defines one (the bytes between its first '{' and the next '}', if any),
// becomes "<tag>}{<key>", both escaped: its state keys then read
// "<prefix>:{<tag>}{<key>}<suffix>", in the slot of its tag, and no other
// key's (a key without a tag never has "}{" there). Escaping
// percent-encodes '%', '{', '}' and '#' and keeps every other byte (NUL,
// invalid UTF-8): Redis keys are binary safe. A part whose escaped form is
// longer than maxTagLen, which an attacker can send in a header, becomes
// "#" + base64url(sha256(part)) instead; '#' is escaped in every other
// part, so the two forms cannot collide.
func escapeTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return escapePart(key[i+1:i+1+j]) + "}{" + escapePart(key)
		}
	}
	return escapePart(key)
}

// slotTag is the part of an escaped tag that chooses its Cluster slot.
func slotTag(tag string) string {
	if i := strings.IndexByte(tag, '}'); i >= 0 {
		return tag[:i]
	}
	return tag
}

func escapePart(key string) string {
	if len(key) > maxTagLen {
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
	if b.Len() > maxTagLen {
		return hashedTag(key)
	}
	return b.String()
}

func hashedTag(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// slot is the Redis Cluster hash slot of every key with hash tag tag (an
// escapeTag's slotTag):
// CRC16 (XMODEM) modulo 16384, as the Cluster specification defines it.
func slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return int(crc) & 16383
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
