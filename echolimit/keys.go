package echolimit

import (
	"errors"

	"github.com/redlimit/redlimit/core"
)

// errNotEcho is returned by the key functions of this package when they are
// used by a Policy that is not an echolimit middleware's.
var errNotEcho = errors.New("echolimit: key function used outside an echolimit middleware")

// echoRealIP is a request whose peer address is Echo's resolved client IP.
type echoRealIP struct{ request }

func (q echoRealIP) RemoteAddr() string { return q.c.RealIP() }

// KeyByEchoRealIP keys requests by Echo's c.RealIP(), grouped like
// core.KeyByIP (IPv6 by /64), for Config.Key.
//
// Use it only if you configured Echo's trusted proxies (e.IPExtractor, e.g.
// echo.ExtractIPFromXFFHeader with echo.TrustIPRange): without an
// IPExtractor, Echo v4 takes the first X-Forwarded-For entry from any
// peer, so any client could choose its own key. The default key
// (Config.ClientIP) does not depend on Echo's settings.
func KeyByEchoRealIP() core.KeyFunc {
	byIP := core.KeyByIP(nil)
	return func(r core.Request) (string, error) {
		q, ok := r.(request)
		if !ok {
			return "", errNotEcho
		}
		return byIP(echoRealIP{q})
	}
}
