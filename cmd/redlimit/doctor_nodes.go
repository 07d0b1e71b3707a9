package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// denied reports an ACL refusal: the user lacks the command, and the
// server itself may be fine.
func denied(err error) bool { return err != nil && strings.Contains(err.Error(), "NOPERM") }

// nodeFindings says, per node that did not answer, why and what it
// means: an ACL that refuses INFO is not an outage, and one master down
// fails the keys of its slots only.
func nodeFindings(ctx context.Context, rdb redis.UniversalClient, nodes []node) []finding {
	var fs []finding
	cluster, _ := rdb.(*redis.ClusterClient)
	var slots map[string]string
	for _, n := range nodes {
		switch {
		case n.err == nil:
		case denied(n.err):
			fs = append(fs, finding{"permissions", "warn", n.addr + ": " + n.err.Error(),
				"this user may not run INFO, so doctor cannot read the server's version, memory and replicas; decisions do not need it (grant +info, or run doctor as an admin)"})
		case cluster == nil:
			fs = append(fs, finding{"server", "fail", n.addr + ": " + n.err.Error(), "Redis does not answer: every decision fails, and the fail policy answers"})
		default:
			if slots == nil {
				slots = slotRanges(ctx, cluster)
			}
			fs = append(fs, finding{"node", "fail", fmt.Sprintf("%s (slots %s): %v", n.addr, or(slots[n.addr], "unknown"), n.err),
				"this master does not answer: decisions on keys of its slots fail (the fail policy answers) until a replica takes over; the other masters decide as usual"})
		}
	}
	return fs
}

// slotRanges maps each master's address to the slot ranges it serves,
// as a node that answers sees them ("0-5460").
func slotRanges(ctx context.Context, c *redis.ClusterClient) map[string]string {
	out := map[string]string{}
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return out
	}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			for _, s := range sh.Slots {
				r := fmt.Sprintf("%d-%d", s.Start, s.End)
				if prev := out[addr]; prev != "" {
					r = prev + ", " + r
				}
				out[addr] = r
			}
		}
	}
	return out
}

// timeFinding checks TIME, which inspect and reset read Redis' clock with.
func timeFinding(ctx context.Context, rdb redis.UniversalClient) finding {
	err := rdb.Time(ctx).Err()
	switch {
	case err == nil:
		return finding{"time", "ok", "TIME answers", "redlimit inspect and reset read Redis' clock"}
	case denied(err):
		return finding{"permissions", "fail", "TIME: " + err.Error(),
			"this user may not run TIME: redlimit inspect and reset fail (grant +time); the Limiter's decisions do not need it"}
	}
	return finding{"time", "fail", "TIME: " + err.Error(), "redlimit inspect and reset cannot read Redis' clock"}
}

// minReplicas reads min-replicas-to-write and -max-lag, or says why not.
func minReplicas(ctx context.Context, c *redis.Client) string {
	cfg, err := c.ConfigGet(ctx, "min-replicas-*").Result()
	if err != nil {
		return "min-replicas-* unknown (CONFIG GET: " + err.Error() + ")"
	}
	return fmt.Sprintf("min-replicas-to-write %s, min-replicas-max-lag %s", or(cfg["min-replicas-to-write"], "?"), or(cfg["min-replicas-max-lag"], "?"))
}

// replicasFinding reports each master's replicas, how far behind each
// is (seconds since its last ack, and bytes), and the min-replicas
// settings that bound what a failover can lose.
func replicasFinding(nodes []node) finding {
	var parts []string
	status, none, lagging := "ok", 0, false
	for _, n := range nodes {
		offset := num(field(n.info, "master_repl_offset"))
		var reps []string
		for i := 0; ; i++ {
			line := field(n.info, "slave"+strconv.Itoa(i))
			if line == "" {
				break
			}
			kv := map[string]string{}
			for p := range strings.SplitSeq(line, ",") {
				k, v, _ := strings.Cut(p, "=")
				kv[k] = v
			}
			behind := offset - num(kv["offset"])
			reps = append(reps, fmt.Sprintf("%s:%s %s, lag %ss, %.0f bytes behind", kv["ip"], kv["port"], kv["state"], kv["lag"], behind))
			lagging = lagging || kv["state"] != "online" || num(kv["lag"]) > 2
		}
		if len(reps) == 0 {
			none++
			reps = append(reps, "no replicas")
		}
		parts = append(parts, fmt.Sprintf("%s: %s; %s", n.addr, strings.Join(reps, "; "), n.minReplicas))
	}
	meaning := "replication is asynchronous: a failover loses the counts a replica had not received (docs/operations.md, Failover); min-replicas-to-write N with min-replicas-max-lag S refuses writes when fewer than N replicas acked within S seconds, bounding the loss to S seconds; core.WithReplicaAcks waits for each decision's"
	switch {
	case lagging:
		status = "warn"
		meaning = "a replica is behind or not online: a failover now would lose its missing counts, and the promoted replica admit them again; " + meaning
	case none == len(nodes):
		status = "info"
	case none > 0:
		status = "warn"
		meaning = "a master has no replica: if it fails its slots fail until it is back; " + meaning
	}
	return finding{"replicas", status, strings.Join(parts, " | "), meaning}
}
