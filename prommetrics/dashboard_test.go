package prommetrics_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/prommetrics"
)

// The Grafana dashboard and the Prometheus rules of the repository.
const (
	dashboardFile = "../deploy/grafana/redlimit.json"
	rulesDir      = "../deploy/prometheus"
)

var (
	metricName   = regexp.MustCompile(`\bredlimit_[a-z_]+`)
	fqName       = regexp.MustCompile(`fqName: "([^"]+)"`)
	groupLabels  = regexp.MustCompile(`\b(?:by|without) \(([^)]*)\)`)
	matchedLabel = regexp.MustCompile(`[{,]\s*([a-zA-Z_]+)\s*(?:=~|!=|!~|=)`)
)

// exported returns the names of the series a Collector with a Limiter
// exports: a histogram's _bucket, _sum and _count.
func exported(t *testing.T) []string {
	t.Helper()
	_, rdb := redistest.Mini(t)
	l, err := core.New(rdb, core.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ch := make(chan *prometheus.Desc, 64)
	prommetrics.New(prommetrics.WithLimiter(l)).Describe(ch)
	close(ch)
	var names []string
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names = append(names, m[1])
		if strings.HasSuffix(m[1], "_seconds") {
			names = append(names, m[1]+"_bucket", m[1]+"_sum", m[1]+"_count")
		}
	}
	return names
}

// dashboardExprs returns every query of the dashboard: each panel's
// targets and each templating variable's.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		var q struct{ Query string }
		if v.Type == "query" && json.Unmarshal(v.Query, &q) == nil {
			exprs = append(exprs, q.Query)
		}
	}
	if d.UID == "" || len(exprs) < 10 {
		t.Fatalf("%s: uid %q, %d queries: not the dashboard", dashboardFile, d.UID, len(exprs))
	}
	return exprs
}

// TestDashboardQueries: every query of the Grafana dashboard names only
// series and labels the Collector exports, and the dashboard shows every
// metric; every series the alerting rules and their tests name is
// exported too. With promtool on PATH, every query is valid PromQL.
func TestDashboardQueries(t *testing.T) {
	names := exported(t)
	labels := []string{"policy", "algorithm", "outcome", "refused_by", "reason", "le"}
	exprs := dashboardExprs(t)
	shown := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			shown[strings.TrimSuffix(n, "_bucket")] = true
			if !slices.Contains(names, n) {
				t.Errorf("dashboard query %q: prommetrics exports no %s (it exports %v)", e, n, names)
			}
		}
		for _, m := range append(groupLabels.FindAllStringSubmatch(e, -1), matchedLabel.FindAllStringSubmatch(e, -1)...) {
			for l := range strings.SplitSeq(m[1], ",") {
				if l = strings.TrimSpace(l); !slices.Contains(labels, l) {
					t.Errorf("dashboard query %q: label %q is none of %v", e, l, labels)
				}
			}
		}
	}
	for _, n := range names {
		if base := strings.TrimSuffix(strings.TrimSuffix(n, "_sum"), "_count"); base == n && !shown[n] && !strings.HasSuffix(n, "_bucket") {
			t.Errorf("the dashboard does not show %s", n)
		}
	}
	rules, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	if err != nil || len(rules) < 2 {
		t.Fatalf("rules in %s: %v %v", rulesDir, rules, err)
	}
	for _, f := range rules {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllString(string(data), -1) {
			if !slices.Contains(names, n) {
				t.Errorf("%s names %s, which prommetrics does not export", f, n)
			}
		}
	}
	t.Run("promtool", func(t *testing.T) { promtoolCheck(t, exprs) })
}

// promtoolCheck checks exprs as PromQL, with Grafana's variables replaced
// by values, as the recording rules of a file promtool checks.
func promtoolCheck(t *testing.T, exprs []string) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH: the dashboard's PromQL is not checked (.ci/promtool installs it)")
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$policy", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML scalar
		if strings.HasPrefix(e, "label_values(") {
			continue // Grafana's, not PromQL
		}
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, b.String())
	}
}
