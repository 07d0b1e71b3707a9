package core

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redlimit/redlimit/internal/redistest"
)

func TestInfoField(t *testing.T) {
	info := "# Memory\r\nused_memory:1054112\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\nmaxmemory_policy:volatile-lru\r\n"
	for name, want := range map[string]string{
		"maxmemory": "4194304", "maxmemory_policy": "volatile-lru", "used_memory": "1054112", "absent": "",
	} {
		if got := infoField(info, name); got != want {
			t.Errorf("infoField(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestHealthLogsChangesOnce: a Redis that may evict is a warning on the
// first check that sees it, and not again while nothing changes; keys
// evicted since the last check are a warning too (at most once a minute);
// the risk going away is logged.
func TestHealthLogsChangesOnce(t *testing.T) {
	logs := &records{}
	log := slog.New(logs)
	h := healthState{log: func() *slog.Logger { return log }}
	at := time.Unix(1e9, 0)
	check := func(d time.Duration, mayEvict bool, evicted int64) Health {
		return h.update(Health{Checked: at.Add(d), MayEvict: mayEvict, MaxMemory: 4 << 20,
			MaxMemoryPolicy: map[bool]string{true: "volatile-lru", false: "noeviction"}[mayEvict], EvictedKeys: evicted})
	}
	check(0, true, 0)
	wantRecords(t, logs.take(), "WARN redis may evict rate-limit keys")
	check(time.Minute, true, 0)
	wantRecords(t, logs.take())
	check(2*time.Minute, true, 258)
	wantRecords(t, logs.take(), "WARN redis evicted keys")
	check(2*time.Minute+time.Second, true, 300) // within the minute: quiet
	wantRecords(t, logs.take())
	check(4*time.Minute, false, 300)
	wantRecords(t, logs.take(), "INFO redis no longer evicts keys")
	// A failed check keeps what was known, and is logged once, quietly.
	got := h.update(Health{Checked: at.Add(5 * time.Minute), Err: errors.New("core: ping: i/o timeout")})
	if got.Err == nil || got.MaxMemoryPolicy != "noeviction" || got.EvictedKeys != 300 {
		t.Errorf("a failed check: %+v, want the error and what the last check knew", got)
	}
	h.update(Health{Checked: at.Add(6 * time.Minute), Err: errors.New("core: ping: i/o timeout")})
	wantRecords(t, logs.take(), "DEBUG cannot tell whether redis may evict")
}

// TestPingMiniredis: miniredis answers but has no INFO memory: Ping
// returns no error (Redis answered) and Health.Err says why the risk is
// unknown; a Limiter on it still decides. A Redis that is gone is Ping's
// error.
func TestPingMiniredis(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	l := opsNew(t, rdb)
	h, err := l.Ping(context.Background())
	if err != nil || h.Err == nil || h.Checked.IsZero() || h.MayEvict {
		t.Errorf("Ping on miniredis = %+v, %v; want no error, the INFO error in Health.Err, and no eviction risk claimed", h, err)
	}
	if got := l.Health(); !got.Checked.Equal(h.Checked) && got.Checked.Before(h.Checked) {
		t.Errorf("Health after Ping = %+v, want the Ping's %+v", got, h)
	}
	if r, err := l.Allow(context.Background(), 1, PerSecond(1).For("k")); err != nil || !r.Allowed {
		t.Errorf("Allow = %+v, %v", r, err)
	}
	mr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := l.Ping(ctx); err == nil {
		t.Error("Ping with Redis gone: no error")
	}
}

// TestRealPing: the Redis of REDIS_URL answers INFO; Ping reports what it
// says. (The suites in internal/reliability start Redis servers with
// maxmemory and an eviction policy.)
func TestRealPing(t *testing.T) {
	rdb := redistest.Real(t)
	l := opsNew(t, rdb)
	h, err := l.Ping(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	maxMemory, _ := rdb.ConfigGet(context.Background(), "maxmemory").Result()
	policy, _ := rdb.ConfigGet(context.Background(), "maxmemory-policy").Result()
	t.Logf("Ping: %+v (CONFIG: %v %v)", h, maxMemory, policy)
	if h.MaxMemoryPolicy == "" || h.MaxMemoryPolicy != policy["maxmemory-policy"] {
		t.Errorf("MaxMemoryPolicy %q, want CONFIG's %q", h.MaxMemoryPolicy, policy["maxmemory-policy"])
	}
	if want := h.MaxMemory > 0 && h.MaxMemoryPolicy != "noeviction"; h.MayEvict != want {
		t.Errorf("MayEvict %v with maxmemory %d and %q", h.MayEvict, h.MaxMemory, h.MaxMemoryPolicy)
	}
}
