package redistest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRealStartsItsOwn backs the README's "the tests run on redis-server
// processes they start": without REDIS_URL, Real answers from a
// redis-server the binary started, and that server goes with the binary
// (Pdeathsig). Fails without shared.go (Real skips), or with a server
// outliving its test binary.
func TestRealStartsItsOwn(t *testing.T) {
	if os.Getenv("REDISTEST_SHARED_PROBE") == "1" {
		rdb := Real(t)
		if err := rdb.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		_, _ = os.Stdout.WriteString("ADDR " + rdb.Options().Addr + "\n")
		return
	}
	if _, ok := serverOnPath(); !ok {
		Missing(t, "redis-server is not on PATH")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealStartsItsOwn$", "-test.v")
	cmd.Env = append(os.Environ(), "REDISTEST_SHARED_PROBE=1", "REDIS_URL=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the probe: %v\n%s", err, out)
	}
	addr := ""
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("the probe named no server:\n%s", out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return // gone with its binary
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the probe's redis-server at %s outlived it", addr)
		}
	}
}
