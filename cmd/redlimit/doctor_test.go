package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// doctorStatus runs doctor -json and returns each check's status and value.
func doctorStatus(t *testing.T, args ...string) (map[string]string, int) {
	t.Helper()
	out, errs, code := cli(t, append([]string{"-json"}, append(args, "doctor")...)...)
	var doc struct{ Findings []finding }
	if err := jsonDecode(out, &doc); err != nil {
		t.Fatalf("doctor -json: %v in %q %q", err, out, errs)
	}
	status := map[string]string{}
	for _, f := range doc.Findings {
		status[f.Check] += f.Status + ": " + f.Value + "; "
	}
	return status, code
}

// TestDoctorPermissions: an ACL user without INFO is told apart from a
// Redis that does not answer (it said "Redis does not answer"), and one
// without TIME fails doctor, since inspect and reset need it (it said all
// was well).
func TestDoctorPermissions(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Admin(t)
	ctx := context.Background()
	for user, rule := range map[string]string{"noinfo": "-info", "notime": "-time"} {
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "&*", "+@all", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, code := doctorStatus(t, "-redis", "redis://noinfo:x@"+s.Addr())
	if code != 0 || !strings.HasPrefix(st["permissions"], "warn: ") || !strings.Contains(st["permissions"], "INFO") ||
		st["server"] != "" || !strings.HasPrefix(st["latency"], "ok") {
		t.Errorf("doctor without INFO: exit %d, %v; want a permissions warning, exit 0", code, st)
	}
	st, code = doctorStatus(t, "-redis", "redis://notime:x@"+s.Addr())
	if code != 1 || !strings.HasPrefix(st["permissions"], "fail: TIME") || !strings.HasPrefix(st["server"], "ok") {
		t.Errorf("doctor without TIME: exit %d, %v; want a permissions failure, exit 1", code, st)
	}
}

// TestDoctorNodeDown: with one master of a Cluster killed, doctor reports
// it failing with its slot range, beside the masters that answer (it said
// only "every decision fails"). The Cluster is the test's own: the shared
// one is never killed.
func TestDoctorNodeDown(t *testing.T) {
	nodes := redistest.StartCluster(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	nodes[0].Kill() // slots 0-5460; its replica takes over after the node timeout (2 s)
	st, code := doctorStatus(t, "-redis-cluster", strings.Join(addrs, ","), "-timeout", "20s")
	if code != 1 || !strings.HasPrefix(st["node"], "fail: "+nodes[0].Addr()+" (slots 0-5460)") ||
		!strings.Contains(st["server"], "2 node(s)") {
		t.Errorf("doctor with a master down: exit %d, %v; want it failing with its slots, and the 2 others answering", code, st)
	}
}
