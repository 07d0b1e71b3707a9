package redistest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeServer writes a program that reports version as a server's
// --version does.
func fakeServer(t *testing.T, name, version string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	script := "#!/bin/sh\necho '" + version + "'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestServerArgsByVersion: a server before Redis 7 is not given
// --enable-debug-command, which it refuses and exits on; later ones, and
// Valkey, are. Guards: "StartServer passes only the options that server's
// version knows" (the package doc).
func TestServerArgsByVersion(t *testing.T) {
	for _, tc := range []struct {
		version string
		debug   bool
	}{
		{"Redis server v=6.2.14 sha=00000000:0 malloc=jemalloc-5.1.0 bits=64 build=1", false},
		{"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", true},
		{"Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", true},
		{"something else", false},
	} {
		bin := fakeServer(t, "server", tc.version)
		args := serverArgs(bin, "6379", t.TempDir())
		if got := slices.Contains(args, "--enable-debug-command"); got != tc.debug {
			t.Errorf("%q: --enable-debug-command given %v, want %v: %q", tc.version, got, tc.debug, args)
		}
	}
}

// TestRedisServerFromEnv: REDIS_SERVER names the program StartServer runs.
// Guards: "REDIS_SERVER names the server program StartServer runs" (the
// package doc).
func TestRedisServerFromEnv(t *testing.T) {
	bin := fakeServer(t, "valkey-server", "Valkey server v=8.0.1")
	t.Setenv("REDIS_SERVER", bin)
	if got := RedisServer(t); got != bin {
		t.Errorf("RedisServer with REDIS_SERVER=%s: %s", bin, got)
	}
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("REDIS_SERVER", "valkey-server")
	if got := RedisServer(t); got != bin {
		t.Errorf("RedisServer with REDIS_SERVER=valkey-server on PATH: %s, want %s", got, bin)
	}
}

// TestNeedFunctions: a server that refuses FUNCTION (miniredis, as Redis
// 6.2 does) skips the test, one with it (Redis 7) does not. Guards:
// NeedFunctions' "skips a test of Redis functions on a server that refuses
// them".
func TestNeedFunctions(t *testing.T) {
	_, mini := Mini(t)
	reached := false
	t.Run("refused", func(t *testing.T) {
		NeedFunctions(t, mini)
		reached = true
	})
	if reached {
		t.Error("a server without FUNCTION did not skip the test")
	}
	srv := StartServer(t)
	reached = false
	t.Run("redis-server", func(t *testing.T) {
		NeedFunctions(t, srv.Client(t, nil))
		reached = true
	})
	if !reached && majorVersion(RedisServer(t)) >= 7 {
		t.Error("a Redis 7 skipped a test of functions")
	}
}
