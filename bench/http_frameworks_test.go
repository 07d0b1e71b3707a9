package bench

import (
	"net"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/fiberlimit"
	"github.com/redlimit/redlimit/ginlimit"
)

func init() {
	gin.SetMode(gin.ReleaseMode)
	httpApps = append(httpApps,
		httpApp{"gin", func(tb testing.TB, l *core.Limiter) (string, func()) {
			r := gin.New()
			if l != nil {
				r.Use(ginlimit.New(l, httpLimit))
			}
			r.GET("/hello", func(c *gin.Context) { c.Data(http.StatusOK, "text/plain", hello) })
			return httptestStart(r)
		}},
		httpApp{"echo", func(tb testing.TB, l *core.Limiter) (string, func()) {
			e := echo.New()
			if l != nil {
				e.Use(echolimit.New(l, httpLimit))
			}
			e.GET("/hello", func(c echo.Context) error { return c.Blob(http.StatusOK, "text/plain", hello) })
			return httptestStart(e)
		}},
		httpApp{"fiber", func(tb testing.TB, l *core.Limiter) (string, func()) {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			if l != nil {
				app.Use(fiberlimit.New(fiberlimit.Config{Limiter: l, Limit: httpLimit}))
			}
			app.Get("/hello", func(c *fiber.Ctx) error { return c.Send(hello) })
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				tb.Fatal(err)
			}
			go func() { _ = app.Listener(ln) }()
			return "http://" + ln.Addr().String() + "/hello", func() { _ = app.Shutdown() }
		}},
	)
}
