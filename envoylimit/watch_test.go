package envoylimit

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestReloadPathGone: a configuration whose files cannot be looked at (its
// directory gone, as in a botched deploy) is reported once, not at every
// look, and the last good one stays until it is back. Each look is a call
// of reload here, so that the count does not depend on a clock.
func TestReloadPathGone(t *testing.T) {
	defer func(every time.Duration) { reloadEvery = every }(reloadEvery)
	reloadEvery = time.Hour // the test looks, not the watcher
	_, rdb := redistest.Mini(t)
	var logs redistest.LogBuffer
	reg := prometheus.NewRegistry()
	dir := filepath.Join(t.TempDir(), "conf")
	must(t, os.Mkdir(dir, 0o755))
	writeFile(t, filepath.Join(dir, "s.yaml"), simple)
	srv, err := New(Config{Path: dir, Metrics: reg,
		Limiter: limiter(t, rdb, core.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))})
	must(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	seen := srv.rules.Load().stamp
	must(t, os.Rename(dir, dir+".gone"))
	for range 5 {
		seen = srv.reload(dir, seen)
	}
	if got := testutil.ToFloat64(srv.metrics.loadErr); got != 1 {
		t.Errorf("config_load_error = %v after 5 looks at a path gone; want 1", got)
	}
	if n := strings.Count(logs.String(), "configuration refused"); n != 1 {
		t.Errorf("%d ERROR lines; want 1:\n%s", n, logs.String())
	}
	if srv.rules.Load().domains["s"] == nil {
		t.Error("the last good configuration is gone")
	}
	must(t, os.Rename(dir+".gone", dir))
	seen = srv.reload(dir, seen)
	srv.reload(dir, seen)
	if got := testutil.ToFloat64(srv.metrics.loadOK); got != 2 {
		t.Errorf("config_load_success = %v once the path is back; want 2 (the first load, and this one)", got)
	}
}

// TestNewAfterFailure: a New that fails leaves the Registerer as it found
// it, so that a program can fix its configuration and call New again.
func TestNewAfterFailure(t *testing.T) {
	_, rdb := redistest.Mini(t)
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "s.yaml"), "domain: s\ndescriptors:\n  - key: k\n    ratelimit: {}\n")
	if _, err := New(Config{Limiter: limiter(t, rdb), Path: dir, Metrics: reg}); err == nil {
		t.Fatal("New of a bad configuration: no error")
	}
	writeFile(t, filepath.Join(dir, "s.yaml"), simple)
	srv, err := New(Config{Limiter: limiter(t, rdb), Path: dir, Metrics: reg})
	if err != nil {
		t.Fatalf("New again, on the same Registerer: %v", err)
	}
	_ = srv.Close()
	if _, err := New(Config{Limiter: limiter(t, rdb), Path: dir, Metrics: reg}); err == nil {
		t.Error("New while another Server's series are registered: no error")
	}
}
