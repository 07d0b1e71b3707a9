package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/inspect"
)

// finding is one thing doctor checked, and what it means for redlimit.
type finding struct {
	Check   string `json:"check"`
	Status  string `json:"status"` // ok, info, warn or fail
	Value   string `json:"value"`
	Meaning string `json:"meaning"`
}

// node is what one server (each master of a Cluster) told doctor.
type node struct {
	addr, info  string
	libs        []string
	libsErr     error
	err         error  // it did not answer INFO: down, or refused
	minReplicas string // CONFIG GET min-replicas-to-write / -max-lag, or why not
}

// doctor checks the server for what redlimit needs, and fails when a
// check failed.
func doctor(ctx context.Context, e *env) error {
	nodes, err := eachNode(ctx, e.rdb)
	answered := slices.DeleteFunc(slices.Clone(nodes), func(n node) bool { return n.err != nil })
	var fs []finding
	switch {
	case err != nil && len(nodes) == 0:
		fs = append(fs, finding{"server", "fail", err.Error(), "Redis does not answer: every decision fails, and the fail policy answers"})
	default:
		fs = append(fs, nodeFindings(ctx, e.rdb, nodes)...)
		if len(answered) > 0 {
			fs = append(fs, serverFinding(answered), functionsFinding(answered), memoryFinding(answered), replicasFinding(answered))
		}
		if c, ok := e.rdb.(*redis.ClusterClient); ok {
			fs = append(fs, slotsFinding(ctx, c))
		}
		fs = append(fs, timeFinding(ctx, e.rdb), latencyFinding(ctx, e.rdb))
	}
	failed := slices.ContainsFunc(fs, func(f finding) bool { return f.Status == "fail" })
	if e.json {
		if err := e.emit(struct {
			OK       bool      `json:"ok"`
			Findings []finding `json:"findings"`
		}{!failed, fs}); err != nil {
			return err
		}
	} else {
		for _, f := range fs {
			e.printf("%-4s  %-9s  %s\n      %s\n", f.Status, f.Check, f.Value, f.Meaning)
		}
	}
	if failed {
		return errFailed
	}
	return nil
}

// eachNode asks every master (or the one server) for INFO, the redlimit
// function libraries and the min-replicas settings. A node that does not
// answer is in the list with its error, so that one master down in a
// Cluster is told apart from all of them.
func eachNode(ctx context.Context, rdb redis.UniversalClient) ([]node, error) {
	var mu sync.Mutex
	var nodes []node
	ask := func(ctx context.Context, c *redis.Client) error {
		n := askNode(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n)
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, ask)
	case *redis.Client:
		err = ask(ctx, c)
	}
	slices.SortFunc(nodes, func(a, b node) int { return strings.Compare(a.addr, b.addr) })
	return nodes, err
}

// askNode is what one server answers.
func askNode(ctx context.Context, c *redis.Client) node {
	n := node{addr: c.Options().Addr}
	// One section a call: Redis before 7 takes one INFO section only.
	var info strings.Builder
	for _, section := range []string{"server", "memory", "stats", "replication"} {
		text, err := c.Info(ctx, section).Result()
		if err != nil {
			n.err = fmt.Errorf("INFO %s: %w", section, err)
			return n
		}
		info.WriteString(text)
	}
	n.info = info.String()
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "redlimit_*"}).Result()
	n.libsErr = err
	for _, l := range libs {
		n.libs = append(n.libs, l.Name)
	}
	n.minReplicas = minReplicas(ctx, c)
	return n
}

func serverFinding(nodes []node) finding {
	var kinds []string
	for _, n := range nodes {
		kind := "Redis " + field(n.info, "redis_version")
		if v := field(n.info, "valkey_version"); v != "" {
			kind = "Valkey " + v
		}
		kind += " " + field(n.info, "redis_mode")
		if !slices.Contains(kinds, kind) {
			kinds = append(kinds, kind)
		}
	}
	f := finding{"server", "ok", fmt.Sprintf("%s (%d node(s): %s)", strings.Join(kinds, ", "), len(nodes), nodes[0].addr),
		"redlimit runs on Redis 6.2+ and Valkey, standalone or Cluster: FCALL where FUNCTION exists, EVALSHA elsewhere"}
	switch {
	case strings.Contains(kinds[0], "sentinel"):
		f.Status, f.Meaning = "warn", "this is a Sentinel, not a data node: point -redis at the master (the app uses a failover client)"
	case len(kinds) > 1:
		f.Status, f.Meaning = "warn", "the masters run different servers: a rolling upgrade? the scripts run on each as it is"
	}
	return f
}

func functionsFinding(nodes []node) finding {
	var missing, others []string
	for _, n := range nodes {
		if n.libsErr != nil {
			return finding{"functions", "info", "FUNCTION refused: " + n.libsErr.Error(),
				"no Redis functions (Redis < 7, or an ACL): every decision is an EVALSHA, as fast, and nothing to load"}
		}
		if !slices.Contains(n.libs, inspect.Library) {
			missing = append(missing, n.addr)
		}
		for _, l := range n.libs {
			if l != inspect.Library && !slices.Contains(others, l) {
				others = append(others, l)
			}
		}
	}
	f := finding{"functions", "ok", inspect.Library + " loaded on every node",
		"decisions of this redlimit version are one FCALL"}
	if missing != nil {
		f.Status, f.Value = "info", inspect.Library+" not loaded on "+strings.Join(missing, ", ")
		f.Meaning = "a Limiter of this version loads it at start (FUNCTION LOAD); until then it decides with EVALSHA"
	}
	if others != nil {
		f.Value += "; other versions: " + strings.Join(others, ", ")
		f.Meaning += "; other redlimit versions use theirs (FUNCTION DELETE the ones no instance runs)"
	}
	return f
}

func memoryFinding(nodes []node) finding {
	var evicted int64
	for _, n := range nodes {
		evicted += int64(num(field(n.info, "evicted_keys")))
	}
	for _, n := range nodes {
		maxmem, policy := num(field(n.info, "maxmemory")), field(n.info, "maxmemory_policy")
		if maxmem > 0 && policy != "noeviction" {
			return finding{"memory", "warn", fmt.Sprintf("%s: maxmemory %.0f, policy %s; %d keys evicted so far", n.addr, maxmem, policy, evicted),
				"Redis may evict redlimit's keys, and an evicted key is a fresh quota: use noeviction, or a Redis of its own"}
		}
	}
	policy := field(nodes[0].info, "maxmemory_policy")
	if num(field(nodes[0].info, "maxmemory")) == 0 {
		return finding{"memory", "ok", "no maxmemory (policy " + policy + ")",
			"no eviction; every redlimit key has a TTL, so its memory stays bounded by the active keys"}
	}
	return finding{"memory", "ok", "maxmemory with policy noeviction",
		"no key is evicted; a full Redis refuses writes (OOM), and the fail policy answers those decisions"}
}

func slotsFinding(ctx context.Context, c *redis.ClusterClient) finding {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return finding{"slots", "fail", "CLUSTER INFO: " + err.Error(), "the Cluster's state is unknown"}
	}
	state, ok := field(info, "cluster_state"), field(info, "cluster_slots_ok")
	f := finding{"slots", "ok", fmt.Sprintf("state %s, %s of 16384 slots ok", state, ok),
		"every key's slot is served; all of one caller's keys share a slot (hash tag)"}
	if state != "ok" || ok != "16384" {
		f.Status, f.Meaning = "fail", "the keys of uncovered slots fail: their decisions get the fail policy"
	}
	return f
}

func latencyFinding(ctx context.Context, rdb redis.UniversalClient) finding {
	var rtts []time.Duration
	for range 5 {
		start := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return finding{"latency", "fail", "PING: " + err.Error(), "Redis does not answer: the fail policy answers"}
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	f := finding{"latency", "ok", fmt.Sprintf("PING min %v, median %v, max %v", rtts[0].Round(time.Microsecond),
		rtts[2].Round(time.Microsecond), rtts[4].Round(time.Microsecond)), "well within the Limiter's timeout (core.WithTimeout, default 100ms)"}
	if rtts[2] > 10*time.Millisecond {
		f.Status, f.Meaning = "warn", "slow: a decision is about one round trip; keep core.WithTimeout (default 100ms) well above it"
	}
	return f
}

// field returns a "name:value" line's value from an INFO reply.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func num(s string) float64 { n, _ := strconv.ParseFloat(s, 64); return n }
