package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const (
	dashJSON = "../../../deploy/grafana/redlimit.json"
	dashSVG  = "../../../deploy/grafana/redlimit-layout.svg"
)

// TestLayoutIsCurrent: the README's picture is what the dashboard JSON
// gives, so a changed dashboard without a redrawn picture fails here.
func TestLayoutIsCurrent(t *testing.T) {
	got, err := render(dashJSON)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(dashSVG)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what %s gives; redraw it:\n\tGOWORK=off go -C tools run ./cmd/dashlayout -o ../deploy/grafana/redlimit-layout.svg ../deploy/grafana/redlimit.json", dashSVG, dashJSON)
	}
}

// TestEveryPanelDrawn: each panel's title and unit appear, and each query
// at least begins in its panel, so the picture leaves nothing out.
func TestEveryPanelDrawn(t *testing.T) {
	svg, err := render(dashJSON)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dashJSON)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	s := string(svg)
	panels := flatten(d.Panels)
	if len(panels) < 10 {
		t.Fatalf("only %d panels in %s", len(panels), dashJSON)
	}
	for _, p := range panels {
		if !strings.Contains(s, ">"+esc(p.Title)+"<") {
			t.Errorf("panel %q: title not drawn", p.Title)
		}
		if u := p.FieldConfig.Defaults.Unit; u != "" && !strings.Contains(s, esc(p.Type+" · unit "+u)) {
			t.Errorf("panel %q: unit %s not drawn", p.Title, u)
		}
		for _, q := range p.Targets {
			head := wrap(q.Expr, 20)[0]
			if !strings.Contains(s, esc(head)) {
				t.Errorf("panel %q: query %q not drawn", p.Title, q.Expr)
			}
		}
	}
}

// TestWrapKeepsEveryRune: wrapping only cuts, at most n runes a line, and
// drops no text but the spaces it cuts at.
func TestWrapKeepsEveryRune(t *testing.T) {
	s := `sum by (policy) (rate(redlimit_decisions_total{policy=~"$policy",outcome="denied"}[$__rate_interval]))`
	lines := wrap(s, 30)
	for _, l := range lines {
		if n := len([]rune(l)); n > 30 {
			t.Errorf("line of %d runes > 30: %q", n, l)
		}
	}
	strip := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	if got := strip(strings.Join(lines, "")); got != strip(s) {
		t.Errorf("wrapped text %q, want %q", got, strip(s))
	}
}
