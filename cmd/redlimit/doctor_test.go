package main

import (
	"context"
	"errors"
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

// TestDoctorNodeDown: a master that does not answer is reported with its
// slot ranges, beside the masters that do (it said only "every decision
// fails"). The Cluster is shared, so the outage is the finding's input.
func TestDoctorNodeDown(t *testing.T) {
	c := redistest.Cluster(t)
	ctx := context.Background()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	down := slots[0].Nodes[0].Addr
	nodes := []node{{addr: down, err: errors.New("dial tcp: connection refused")}, {addr: "other:1"}}
	fs := nodeFindings(ctx, c, nodes)
	want := "slots " + strings.Split(slotRanges(ctx, c)[down], ",")[0]
	if len(fs) != 1 || fs[0].Check != "node" || fs[0].Status != "fail" || !strings.HasPrefix(fs[0].Value, down+" (") ||
		!strings.Contains(fs[0].Value, want) || !strings.Contains(fs[0].Meaning, "other masters decide as usual") {
		t.Errorf("findings %+v; want %s failing with %s", fs, down, want)
	}
}
