package redistest

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestMain runs this package's tests, or, under REDISTEST_AS_LONG=1, acts
// as a long suite's test binary (MainLong) for TestMainLongSaysNoTestsRan.
func TestMain(m *testing.M) {
	if os.Getenv("REDISTEST_AS_LONG") == "1" {
		MainLong(m)
	}
	os.Exit(m.Run())
}

// TestMainLongSaysNoTestsRan: a long suite that runs nothing (no CI, no
// REDIS_URL) prints what go test reads to end its "ok" line with
// "[no tests to run]" (cmd/go's check, copied), so that `go test work >
// log` says so in the log, where a passing package's output is dropped.
func TestMainLongSaysNoTestsRan(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=TestServerArgsByVersion")
	cmd.Env = append(os.Environ(), "REDISTEST_AS_LONG=1", "CI=", "REDIS_URL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the long suite's binary: %v\n%s", err, out)
	}
	marker := []byte("\ntesting: warning: no tests to run\n")
	if !bytes.HasPrefix(out, marker[1:]) && !bytes.Contains(out, marker) {
		t.Errorf("output %q: go test would print a plain ok, as if the suite had run", out)
	}
}

// TestMissingFailsUnderCI backs "a green CI run must never mean the
// real-Redis suites did not run" (the package doc): under CI=true a
// missing prerequisite fails its test, where elsewhere it skips it.
func TestMissingFailsUnderCI(t *testing.T) {
	if os.Getenv("REDISTEST_MISSING") == "1" {
		Missing(t, "nothing here (a probe)")
		return
	}
	for _, ci := range []string{"", "true"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingFailsUnderCI$")
		cmd.Env = append(os.Environ(), "REDISTEST_MISSING=1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != (ci != "") {
			t.Errorf("CI=%q: failed %v, want %v\n%s", ci, failed, ci != "", out)
		}
	}
}
