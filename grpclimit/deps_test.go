package grpclimit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The dependency rules of internal/deps, for this module: grpclimit links
// gRPC and nothing of another framework, and no other module of the
// repository requires gRPC, so that a Gin user's build list gains nothing
// from this adapter.

const (
	rootModule = "github.com/redlimit/redlimit"
	thisModule = rootModule + "/grpclimit"
)

// frameworks are the module prefixes of the other adapters and metrics
// packages: grpclimit links none of them.
var frameworks = []string{
	"github.com/alicebob/miniredis",
	"github.com/gin-gonic/gin",
	"github.com/labstack/echo/",
	"github.com/gofiber/fiber/",
	"github.com/valyala/fasthttp",
	"github.com/prometheus/",
	"go.opentelemetry.io/",
}

// grpcModules are what this module brings: no other module may require
// them.
var grpcModules = []string{"google.golang.org/grpc", "google.golang.org/genproto", thisModule}

// linked are this repository's packages grpclimit may link: itself, core
// and httplimit, and what they bring: core's hooks for the operator's tool,
// and its observers, and httplimit's key formation (see
// internal/deps' coreHooks).
var linked = []string{"grpclimit", "core", "httplimit",
	"internal/inspect", "internal/observe", "internal/keyspace", "internal/clock", "internal/adapt"}

// TestDependencies: grpclimit links only core, httplimit, go-redis, gRPC
// and the standard library's kin, never another framework, a metrics SDK
// or miniredis.
func TestDependencies(t *testing.T) {
	for _, dep := range goList(t, ".", "list", "-deps", thisModule) {
		for _, f := range frameworks {
			if strings.HasPrefix(dep, f) {
				t.Errorf("grpclimit links %s", dep)
			}
		}
		if rest, ok := strings.CutPrefix(dep, rootModule+"/"); ok && !slices.Contains(linked, rest) {
			t.Errorf("grpclimit links %s; it may import only core and httplimit of this repository", dep)
		}
	}
}

// TestModuleGraphs: as a user's go.mod would see them (without go.work),
// no other module of the library requires gRPC or this module (but
// envoylimit, a gRPC service itself, whose graph internal/deps checks), and this
// module requires no other framework. (gRPC's own go.mod requires
// OpenTelemetry, for its optional stats package, which grpclimit does not
// link: see TestDependencies.)
func TestModuleGraphs(t *testing.T) {
	dirs := []string{".."}
	matches, err := filepath.Glob(filepath.Join("..", "*", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		dir := filepath.Dir(m)
		if name := filepath.Base(dir); name != "grpclimit" && name != "envoylimit" && (strings.HasSuffix(name, "limit") || strings.HasSuffix(name, "metrics")) {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) < 3 {
		t.Fatalf("found the modules %q: want the root, ginlimit and the rest", dirs)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		if dir == ".." {
			name = "root"
		}
		t.Run(name, func(t *testing.T) {
			mods := goList(t, dir, "list", "-m", "all")
			if len(mods) == 0 || !strings.HasPrefix(mods[0], rootModule) {
				t.Fatalf("go list -m all in %s: %q, want the module first", dir, mods)
			}
			for _, m := range mods {
				for _, g := range grpcModules {
					if strings.HasPrefix(m, g) {
						t.Errorf("module %s requires %s: its users would download gRPC", dir, m)
					}
				}
			}
		})
	}
	t.Run("grpclimit", func(t *testing.T) {
		mods := goList(t, ".", "list", "-m", "all")
		if !slices.Contains(mods, "google.golang.org/grpc") {
			t.Fatalf("go list -m all: %q, want google.golang.org/grpc among them", mods)
		}
		for _, m := range mods {
			for _, f := range frameworks {
				if strings.HasPrefix(m, f) && f != "go.opentelemetry.io/" && f != "github.com/alicebob/miniredis" {
					t.Errorf("grpclimit requires %s", m)
				}
			}
		}
	})
}

// goList runs go with args in the module at dir, without the workspace,
// and returns its output's fields.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.Fields(string(out))
}
