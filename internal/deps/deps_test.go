package deps

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/redlimit/redlimit"

// Module prefixes no package of the library may link, nor any module
// require, unless listed in its allowed set below.
var heavy = []string{
	"github.com/alicebob/miniredis",
	"github.com/gin-gonic/gin",
	"github.com/labstack/echo/v4",
	"github.com/labstack/echo/v5",
	"github.com/gofiber/fiber/v2",
	"github.com/gofiber/fiber/v3",
	"github.com/valyala/fasthttp",
	"github.com/prometheus/",
	"go.opentelemetry.io/",
	"google.golang.org/grpc",
	"google.golang.org/genproto",
	"github.com/envoyproxy/",
}

var packages = []struct {
	pkg     string
	dir     string   // the module's directory, from the repository root
	allowed []string // of heavy, the ones this package may link
	imports []string // of this repository's packages, the ones it may import
}{
	{"core", ".", nil, nil},
	{"internal/inspect", ".", nil, nil},
	{"internal/observe", ".", nil, nil},
	{"internal/clock", ".", nil, nil},
	{"internal/keyspace", ".", nil, nil},
	{"internal/adapt", ".", nil, nil},
	{"httplimit", ".", nil, []string{"core", "internal/keyspace", "internal/adapt"}},
	{"nethttplimit", ".", nil, []string{"core", "httplimit", "internal/keyspace"}},
	{"redlimittest", ".", []string{"github.com/alicebob/miniredis"}, []string{"core"}},
	{"ginlimit", "ginlimit", []string{"github.com/gin-gonic/gin"}, []string{"core", "httplimit"}},
	{"echolimit", "echolimit", []string{"github.com/labstack/echo/v4"}, []string{"core", "httplimit"}},
	{"echov5limit", "echov5limit", []string{"github.com/labstack/echo/v5"}, []string{"core", "httplimit"}},
	{"fiberlimit", "fiberlimit", []string{"github.com/gofiber/fiber/v2", "github.com/valyala/fasthttp"}, []string{"core", "httplimit"}},
	{"fiberv3limit", "fiberv3limit", []string{"github.com/gofiber/fiber/v3", "github.com/valyala/fasthttp"}, []string{"core", "httplimit"}},
	{"prommetrics", "prommetrics", []string{"github.com/prometheus/"}, []string{"core", "httplimit"}},
	{"otelmetrics", "otelmetrics", []string{"go.opentelemetry.io/"}, []string{"core", "httplimit"}},
	// (gRPC's go.mod requires OpenTelemetry and, for xDS, Envoy's protos,
	// which grpclimit does not link.)
	{"grpclimit", "grpclimit", []string{"google.golang.org/grpc", "google.golang.org/genproto", "go.opentelemetry.io/", "github.com/envoyproxy/"}, []string{"core", "httplimit"}},
	// Envoy's protocol: its protos, gRPC and Prometheus for its metrics (and a
	// YAML parser for envoyproxy/ratelimit's configuration), in a module of its own.
	{"envoylimit", "envoylimit", envoyDeps, []string{"core"}},
	// The CLI is a module of its own, so that its Envoy service's protos reach
	// no user of the middleware. serve's /metrics are prommetrics' series.
	{"cmd/redlimit", "cmd/redlimit", envoyDeps, []string{"core", "envoylimit", "httplimit", "prommetrics", "internal/inspect", "internal/keyspace"}},
}

var envoyDeps = []string{"github.com/envoyproxy/", "google.golang.org/grpc", "google.golang.org/genproto",
	"go.opentelemetry.io/", "github.com/prometheus/"}

// TestDependencies: each package links only what its users expect, and
// core knows nothing of HTTP.
// coreHooks are where core shows its Redis state to cmd/redlimit, and
// learns who calls it (a Policy, a Transport), without an exported API
// (standard library and go-redis only, checked above): whatever links
// core links them.
var coreHooks = []string{"internal/inspect", "internal/observe", "internal/clock"}

func TestDependencies(t *testing.T) {
	for _, tt := range packages {
		t.Run(tt.pkg, func(t *testing.T) {
			deps := goList(t, tt.dir, "list", "-deps", module+"/"+tt.pkg)
			for _, dep := range deps {
				for _, h := range heavy {
					if strings.HasPrefix(dep, h) && !slices.Contains(tt.allowed, h) {
						t.Errorf("%s links %s", tt.pkg, dep)
					}
				}
				if rest, ok := strings.CutPrefix(dep, module+"/"); ok && rest != tt.pkg && !slices.Contains(tt.imports, rest) &&
					(!slices.Contains(coreHooks, rest) || tt.pkg != "core" && !slices.Contains(tt.imports, "core")) &&
					(rest != "internal/keyspace" && rest != "internal/adapt" || !slices.Contains(tt.imports, "httplimit")) { // httplimit's keys, as the CLI forms them; its hooks for the adapters
					t.Errorf("%s links %s; it may import only %v of this repository", tt.pkg, dep, tt.imports)
				}
				if tt.pkg == "core" && (dep == "net/http" || strings.HasPrefix(dep, "net/http/")) {
					t.Errorf("core links %s: the engine must know nothing of HTTP", dep)
				}
				// ARCHITECTURE.md: otelmetrics uses the metric and trace
				// APIs, and the application chooses its SDK (its tests use
				// one).
				if tt.pkg == "otelmetrics" && strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") {
					t.Errorf("otelmetrics links %s: it may use the OpenTelemetry API only", dep)
				}
			}
		})
	}
}

// TestModuleGraphs: a module's requirements, as a user's go.mod would see
// them (without go.work), include no other framework or metrics SDK. The
// root module requires miniredis, for its tests and redlimittest.
func TestModuleGraphs(t *testing.T) {
	seen := map[string]bool{}
	for _, tt := range packages {
		if seen[tt.dir] || inWorkspace[tt.dir] {
			continue
		}
		seen[tt.dir] = true
		t.Run(tt.dir, func(t *testing.T) {
			allowed := append([]string{"github.com/alicebob/miniredis"}, tt.allowed...)
			if tt.dir == "." {
				allowed = []string{"github.com/alicebob/miniredis"}
			}
			for _, m := range goList(t, tt.dir, "list", "-m", "all") {
				for _, h := range heavy {
					if strings.HasPrefix(m, h) && !slices.Contains(allowed, h) {
						t.Errorf("module %s requires %s", tt.dir, m)
					}
				}
			}
		})
	}
}

// inWorkspace are the modules without replace directives (go install
// refuses a module that has them), which require this repository's modules
// at a version that may not be published yet: they are listed in the
// workspace, and have no module graph of their own to check.
var inWorkspace = map[string]bool{"cmd/redlimit": true}

// goList runs go with args in the module at dir (relative to the
// repository root), without the workspace unless it needs it, and returns
// its output's fields.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..", dir)
	if !inWorkspace[dir] {
		cmd.Env = append(os.Environ(), "GOWORK=off")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.Fields(string(out))
}
