package bench

import (
	"net"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/fiberlimit"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/httplimit"
)

func init() {
	gin.SetMode(gin.ReleaseMode)
	httpApps = append(httpApps,
		httpApp{"gin", "gin", func(tb testing.TB, p *httplimit.Policy) (string, func()) {
			r := gin.New()
			if p != nil {
				r.Use(ginlimit.New(p))
			}
			r.GET("/hello", func(c *gin.Context) { c.Data(http.StatusOK, "text/plain", hello) })
			return httptestStart(r)
		}},
		httpApp{"echo", "echo", func(tb testing.TB, p *httplimit.Policy) (string, func()) {
			e := echo.New()
			if p != nil {
				e.Use(echolimit.New(p))
			}
			e.GET("/hello", func(c echo.Context) error { return c.Blob(http.StatusOK, "text/plain", hello) })
			return httptestStart(e)
		}},
		httpApp{"fiber", "fiber", func(tb testing.TB, p *httplimit.Policy) (string, func()) {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			if p != nil {
				app.Use(fiberlimit.New(fiberlimit.Config{Policy: p}))
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
