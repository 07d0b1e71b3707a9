package exampleapp

import (
	"net"
	"testing"
)

// The "listening on" line names -addr as given, the contract's <addr>, and
// the bound address only where -addr left the port to the system.
func TestShownAddr(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6zero, Port: 41234}
	for addr, want := range map[string]string{
		":8080":          ":8080",
		"127.0.0.1:9000": "127.0.0.1:9000",
		"localhost:8080": "localhost:8080",
		"127.0.0.1:0":    "[::]:41234",
		":0":             "[::]:41234",
	} {
		if got := shownAddr(addr, bound); got != want {
			t.Errorf("shownAddr(%q) = %q, want %q", addr, got, want)
		}
	}
}
