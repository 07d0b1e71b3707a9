package deps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/redlimit/redlimit"

// Module prefixes no package of the library may link unless listed in its
// allowed set below.
var heavy = []string{
	"github.com/alicebob/miniredis",
	"github.com/gin-gonic/gin",
	"github.com/labstack/echo",
	"github.com/gofiber/fiber",
	"github.com/valyala/fasthttp",
	"github.com/prometheus/",
	"go.opentelemetry.io/",
}

func TestDependencies(t *testing.T) {
	tests := []struct {
		pkg     string
		allowed []string // of heavy, the ones this package may link
	}{
		{"core", nil},
		{"nethttplimit", nil},
		{"ginlimit", []string{"github.com/gin-gonic/gin"}},
		{"echolimit", []string{"github.com/labstack/echo"}},
		{"fiberlimit", []string{"github.com/gofiber/fiber", "github.com/valyala/fasthttp"}},
		{"prommetrics", []string{"github.com/prometheus/"}},
		{"otelmetrics", []string{"go.opentelemetry.io/"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			deps := listDeps(t, module+"/"+tt.pkg)
			for _, dep := range deps {
				for _, h := range heavy {
					if strings.HasPrefix(dep, h) && !slices.Contains(tt.allowed, h) {
						t.Errorf("%s links %s", tt.pkg, dep)
					}
				}
				if strings.HasPrefix(dep, module+"/") && dep != module+"/core" && dep != module+"/"+tt.pkg {
					t.Errorf("%s links %s: a library package may import only core", tt.pkg, dep)
				}
			}
		})
	}
}

func listDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}
