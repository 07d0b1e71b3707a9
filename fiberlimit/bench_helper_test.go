package fiberlimit

import (
	"net"

	"github.com/valyala/fasthttp"
)

// fasthttpCtx is a request for the benchmark, from 192.0.2.1.
type fasthttpCtx struct{ fasthttp.RequestCtx }

func (c *fasthttpCtx) init() {
	var r fasthttp.Request
	r.Header.SetMethod("GET")
	r.SetRequestURI("/")
	c.Init(&r, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}, nil)
}
