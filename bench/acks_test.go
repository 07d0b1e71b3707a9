package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlimit/redlimit/core"
)

// The contenders of TestInstructionsReplicaAcks: ours plain and batched,
// each without and with core.WithReplicaAcks(1, ...), whose WAIT the
// master answers once its replica acknowledges. The timeout is generous:
// the master runs under valgrind, tens of times slower than alone.
var (
	oursPlainAcks   = ours("ours/plain+acks", "ours-plain-acks", core.TokenBucket, core.WithBatching(1), core.WithReplicaAcks(1, 500*time.Millisecond))
	oursBatchedAcks = ours("ours/batched+acks", "ours-batched-acks", core.TokenBucket, core.WithReplicaAcks(1, 500*time.Millisecond))
)

// TestInstructionsReplicaAcks counts what WithReplicaAcks costs the
// master, in instructions per decision, as TestInstructions counts: on a
// master under callgrind with one replica attached (bench/acks.sh starts
// both), each contender's decisions with and without the WAIT. The
// replication stream is sent in both; the difference is the WAIT, the
// GETACK the master then sends and the ACK it reads back.
func TestInstructionsReplicaAcks(t *testing.T) {
	pid, out := os.Getenv("BENCH_CALLGRIND_PID"), os.Getenv("BENCH_CALLGRIND_OUT")
	if pid == "" || out == "" || os.Getenv("BENCH_REPLICA") == "" {
		t.Skip("BENCH_CALLGRIND_PID, BENCH_CALLGRIND_OUT and BENCH_REPLICA are not set: run bench/acks.sh")
	}
	needRedis(t)
	n := 2000
	q := quota{allowed.quota().rate, time.Hour}
	type cell struct{ g, keys int }
	var b strings.Builder
	fmt.Fprintf(&b, "\n| contender | cell | Redis calls per decision | Redis instructions per decision | commands run per decision |\n|---|---|--:|--:|---|\n")
	info, err := infoClient()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []cell{{1, 1}, {16, 1000}} {
		for _, im := range []impl{oursPlain, oursPlainAcks, oursBatched, oursBatchedAcks} {
			cl := clientFor(t, im.client)
			keys, pattern := keySet(c.keys)
			d, release, err := im.make(cl.rdb, q, keys)
			if err != nil {
				t.Fatalf("%s: %v", im.name, err)
			}
			prime(c.g, c.keys, 2, d)
			cl.ctr.quiesce()
			var ir float64
			var derr error
			var before, after map[string]int64
			s := run(c.g, int64(n), 0, c.keys, d, cl.ctr,
				func() { before, derr = commandCalls(info), callgrind(pid, "-z") },
				func() {
					if derr == nil {
						ir, derr = dumpInstructions(pid, out)
					}
					after = commandCalls(info)
				})
			release()
			if err := unlinkMatching(pattern); err != nil {
				t.Fatal(err)
			}
			if derr != nil || s.errs > 0 {
				t.Fatalf("%s g=%d keys=%d: callgrind %v; %d decisions failed, the first: %v", im.name, c.g, c.keys, derr, s.errs, s.firstErr)
			}
			calls := float64(s.cmds) / float64(s.ops)
			fmt.Fprintf(&b, "| %s | g=%d/keys=%d | %.2f | %.0f | %s |\n", im.name, c.g, c.keys, calls, ir/float64(s.ops), waits(before, after, s.ops))
		}
	}
	t.Log(b.String())
	if path := os.Getenv("BENCH_TABLE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waits is perDecision with the script calls in: what a decision sends.
func waits(before, after map[string]int64, ops int64) string {
	var parts []string
	for _, name := range []string{"fcall", "evalsha"} {
		if d := after[name] - before[name]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/float64(max(ops, 1))))
		}
	}
	if rest := perDecision(before, after, ops); rest != "" {
		parts = append(parts, rest)
	}
	return strings.Join(parts, ", ")
}
