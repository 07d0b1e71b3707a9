package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/redlimit/redlimit/internal/keyspace"
)

// errUsage marks a CLIENT or a flag the command cannot use: exit 2.
var errUsage = errors.New("usage")

// address says how CLIENT names a key: the flags that form it as
// httplimit does (package keyspace), one shape each.
type address struct {
	header string // -header: CLIENT is this header's value (KeyByHeader)
	scope  string // -scope: the key is this Scope's
	raw    bool   // -key: CLIENT is the key Config.Key returned
	core   bool   // -core: CLIENT is the key core.Limiter is called with
	bits   int    // -ipv6-prefix: ClientIP.IPv6Prefix
}

func (a *address) flags(fs *flag.FlagSet) {
	fs.StringVar(&a.header, "header", "", "CLIENT is this header's value (httplimit.KeyByHeader)")
	fs.StringVar(&a.scope, "scope", "", "the state of this Scope of the Policy (Config.Scopes[].Name); CLIENT is its Key's value, none for a Scope without a Key")
	fs.BoolVar(&a.raw, "key", false, "CLIENT is the key your Config.Key returned (a KeyFunc of your own, KeyJoin's a|b)")
	fs.BoolVar(&a.core, "core", false, "CLIENT is the key core.Limiter is called with, no Policy (a Transport's outbound:HOST, your own Rules)")
	fs.IntVar(&a.bits, "ipv6-prefix", 64, "the Policy's ClientIP.IPv6Prefix: IPv6 clients are keyed by their network")
}

// check refuses flags that contradict each other, before Redis is asked.
func (a *address) check(name string) error {
	switch {
	case a.core && (a.header != "" || a.scope != "" || a.raw):
		return fmt.Errorf("%w: -core takes the key as it is: no -header, -scope or -key", errUsage)
	case a.raw && a.header != "":
		return fmt.Errorf("%w: -key and -header are exclusive", errUsage)
	case a.bits < 1 || a.bits > 128:
		return fmt.Errorf("%w: -ipv6-prefix must be 1 to 128, got %d", errUsage, a.bits)
	case a.core:
		return nil
	}
	if err := keyspace.ValidName(name); err != nil {
		return fmt.Errorf("%w: -name %q: %v", errUsage, name, err)
	}
	if a.scope != "" {
		if err := keyspace.ValidName(a.scope); err != nil {
			return fmt.Errorf("%w: -scope %q: %v", errUsage, a.scope, err)
		}
	}
	return nil
}

// key is the key the Limiter is called with for args (CLIENT, or nothing
// for a Scope without a Key) under the Policy name.
func (a *address) key(name string, args []string) (string, error) {
	client := ""
	if len(args) == 1 {
		client = args[0]
	}
	if a.core {
		if client == "" {
			return "", fmt.Errorf("%w: -core needs the key", errUsage)
		}
		return client, nil
	}
	var k string
	switch {
	case client == "" && a.scope != "":
		return keyspace.Scope(name, a.scope, ""), nil
	case client == "":
		return "", fmt.Errorf("%w: which client? give an IP, or -header NAME and its value, or -key KEY", errUsage)
	case a.raw:
		k = client
	case a.header != "":
		if k = keyspace.Header(a.header, client); k == "" {
			return "", fmt.Errorf("%w: a blank %s header keys no request", errUsage, a.header)
		}
	default:
		var err error
		if k, err = keyspace.ParseIP(client, a.bits); err != nil {
			return "", fmt.Errorf("%w: %v: for another key give -header NAME (its value), -key (your Config.Key's key) or -core (a core key)", errUsage, err)
		}
	}
	if a.scope != "" {
		return keyspace.Scope(name, a.scope, k), nil
	}
	return keyspace.Policy(name, k), nil
}
