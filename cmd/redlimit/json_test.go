package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/internal/redistest"
)

// TestJSONEveryOutcome backs "-json prints one JSON object on stdout for
// every outcome, errors included": 9 of these 10 failing runs printed
// nothing on stdout, and `override set -ttl 999us` stored an override
// that lived 1ms.
func TestJSONEveryOutcome(t *testing.T) {
	mr, _ := redistest.Mini(t)
	url := "redis://" + mr.Addr()
	for _, tt := range []struct {
		args []string
		exit int
		want string // in the JSON's error, or "" for a JSON of the command's own
	}{
		{[]string{"-json"}, 2, "no command"},
		{[]string{"-json", "-nosuchflag", "doctor"}, 2, "nosuchflag"},
		{[]string{"-json", "doctor"}, 2, "no Redis"},
		{[]string{"-json", "-redis", url, "frobnicate"}, 2, "bad usage"},
		{[]string{"-json", "-redis", url, "override", "set", "acme", "500/min", "-ttl", "999us"}, 1, "at least 1ms"},
		{[]string{"-json", "-redis", url, "override", "set", "acme", "500/min", "-ttl", "1ns"}, 1, "at least 1ms"},
		{[]string{"-json", "-redis", url, "override", "set", "acme", "lots"}, 1, "lots"},
		{[]string{"-json", "-redis", url, "inspect", "192.0.2.1"}, 1, "no state"},
		{[]string{"-json", "-redis", url, "reset", "192.0.2.1"}, 1, "no state"},
		{[]string{"-json", "-redis", "redis://127.0.0.1:1", "-timeout", "1s", "inspect", "192.0.2.1"}, 1, "TIME"},
		{[]string{"-json", "-redis", "redis://127.0.0.1:1", "-timeout", "1s", "doctor"}, 1, ""},
	} {
		out, errs, code := cli(t, tt.args...)
		var v map[string]any
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&v); err != nil || dec.More() || code != tt.exit {
			t.Errorf("redlimit %q: exit %d, stdout %q (%v), stderr %q; want exit %d and one JSON object", tt.args, code, out, err, errs, tt.exit)
			continue
		}
		if msg, _ := v["error"].(string); tt.want != "" && !strings.Contains(msg, tt.want) {
			t.Errorf("redlimit %q: %v; want an error naming %q", tt.args, v, tt.want)
		}
	}
	if mr.Exists("ratelimit:override:{acme}") {
		t.Errorf("a refused override was stored")
	}
}

func jsonDecode(s string, v any) error { return json.Unmarshal([]byte(s), v) }
