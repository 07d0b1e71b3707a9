package core

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// ErrEmptyKey is returned for an empty key: it almost always means the key
// function found nothing, and sharing one limit among all such callers would
// be a surprise.
var ErrEmptyKey = errors.New("core: empty key")

// maxTagLen is the longest caller key stored as it is, once escaped. Longer
// keys, which an attacker can send in a header, are replaced by their
// SHA-256, so what reaches Redis stays small.
const maxTagLen = 128

// escapeBraces keeps a configured prefix from holding a hash tag.
var escapeBraces = strings.NewReplacer("{", "%7B", "}", "%7D")

// stateKeys appends the Redis keys of tag's state under row:
// "<prefix>:{<tag>}<suffix>", with ":<layer>" after the suffix for the
// layers of AllowLayers after the first. The braces make the caller's key
// the Redis Cluster hash tag, so every key of one caller lands in one slot;
// escapeTag guarantees the tag itself holds no brace that could end it
// early or move the slot.
func stateKeys(dst []string, prefix, tag string, row *algorithm, layer int) []string {
	var layerSuffix string
	if layer > 0 {
		layerSuffix = ":" + strconv.Itoa(layer)
	}
	for _, suffix := range row.suffixes {
		var b strings.Builder
		b.Grow(len(prefix) + len(tag) + len(suffix) + len(layerSuffix) + 3)
		b.WriteString(prefix)
		b.WriteString(":{")
		b.WriteString(tag)
		b.WriteByte('}')
		b.WriteString(suffix)
		b.WriteString(layerSuffix)
		dst = append(dst, b.String())
	}
	return dst
}

// escapeTag makes a caller key safe as a hash tag. '%', '{', '}' and '#'
// are percent-encoded; all other bytes (NUL, invalid UTF-8) are kept: Redis
// keys are binary safe. A key whose escaped form is longer than maxTagLen
// becomes "#" + base64url(sha256(key)) instead; '#' is escaped in every
// other key, so the two forms cannot collide.
func escapeTag(key string) string {
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

// slot is the Redis Cluster hash slot of every key with hash tag tag:
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
