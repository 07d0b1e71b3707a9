package fiberlimit

import (
	"errors"

	"github.com/redlimit/redlimit/core"
)

// errNotFiber is returned by the key functions of this package when they
// are used by a Policy that is not a fiberlimit middleware's.
var errNotFiber = errors.New("fiberlimit: key function used outside a fiberlimit middleware")

// fiberIP is a request whose peer address is Fiber's resolved client IP.
type fiberIP struct{ request }

func (q fiberIP) RemoteAddr() string { return q.c.IP() }

// KeyByFiberIP keys requests by Fiber's c.IP(), grouped like core.KeyByIP
// (IPv6 by /64), for Config.Key.
//
// Use it only if you configured Fiber's trusted proxies (ProxyHeader with
// EnableTrustedProxyCheck and TrustedProxies): with ProxyHeader alone,
// Fiber reads that header from any peer, so any client could choose its own
// key. The default key (Config.ClientIP) does not depend on Fiber's
// settings.
func KeyByFiberIP() core.KeyFunc {
	byIP := core.KeyByIP(nil)
	return func(r core.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotFiber
		}
		return byIP(fiberIP{q})
	}
}
