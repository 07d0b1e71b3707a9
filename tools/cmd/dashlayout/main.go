// Command dashlayout draws a Grafana dashboard's panel layout as an SVG,
// from the dashboard's JSON alone: each panel where Grafana places it, with
// its title, type, unit and PromQL queries. It is a picture of what the
// dashboard shows, not of data: no Grafana and no Prometheus are involved,
// so the README's picture of deploy/grafana/redlimit.json needs neither and
// is kept current by a test (go test in this directory fails when the SVG
// in the repository is not what the JSON gives).
//
//	GOWORK=off go -C tools run ./cmd/dashlayout \
//		-o ../deploy/grafana/redlimit-layout.svg ../deploy/grafana/redlimit.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type dashboard struct {
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// Grafana's grid is 24 columns wide and counts height in rows of 30 px;
// these keep its proportions at a width a README shows whole.
const (
	colW    = 50
	rowH    = 30
	gap     = 4
	header  = 44
	titleSz = 13
	metaSz  = 10
	exprSz  = 9
	// charW is the advance of the monospace font at exprSz, slightly
	// generous, so that wrapped lines stay inside their panel.
	charW = 5.6
	lineH = 11
)

func main() {
	out := flag.String("o", "", "write the SVG to this file (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: dashlayout [-o FILE.svg] DASHBOARD.json")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	svg, err := render(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashlayout:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(svg)
	} else {
		err = os.WriteFile(*out, svg, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashlayout:", err)
		os.Exit(1)
	}
}

// render reads the dashboard JSON at path and returns its layout as SVG.
func render(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("%s: no panels", path)
	}
	var b strings.Builder
	write(&b, d)
	return []byte(b.String()), nil
}

func flatten(ps []panel) []panel {
	var all []panel
	for _, p := range ps {
		all = append(all, p)
		all = append(all, flatten(p.Panels)...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i].GridPos, all[j].GridPos
		if a.Y != b.Y {
			return a.Y < b.Y
		}
		return a.X < b.X
	})
	return all
}

func write(w io.Writer, d dashboard) {
	panels := flatten(d.Panels)
	bottom := 0
	for _, p := range panels {
		bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
	}
	width := 24*colW + 2*gap
	height := header + bottom*rowH + 2*gap
	_, _ = fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n",
		width, height, width, height)
	_, _ = fmt.Fprintf(w, `<rect width="%d" height="%d" fill="#111217"/>`+"\n", width, height)
	vars := make([]string, 0, len(d.Templating.List))
	for _, v := range d.Templating.List {
		vars = append(vars, "$"+v.Name)
	}
	_, _ = fmt.Fprintf(w, `<text x="%d" y="20" font-size="16" fill="#d8d9da" font-weight="bold">%s</text>`+"\n", gap+6, esc(d.Title))
	_, _ = fmt.Fprintf(w, `<text x="%d" y="36" font-size="11" fill="#8e8e8e">Panel layout drawn from the dashboard JSON by tools/cmd/dashlayout: titles, units and queries, no data. Variables: %s</text>`+"\n",
		gap+6, esc(strings.Join(vars, ", ")))
	for _, p := range panels {
		x := gap + p.GridPos.X*colW
		y := header + gap + p.GridPos.Y*rowH
		pw := p.GridPos.W*colW - gap
		ph := p.GridPos.H*rowH - gap
		if p.Type == "row" {
			_, _ = fmt.Fprintf(w, `<text x="%d" y="%d" font-size="14" fill="#d8d9da" font-weight="bold">%s</text>`+"\n", x+6, y+ph-6, esc(p.Title))
			_, _ = fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#34363c"/>`+"\n", x, y+ph, x+pw, y+ph)
			continue
		}
		_, _ = fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" rx="3" fill="#181b1f" stroke="#2c3235"/>`+"\n", x, y, pw, ph)
		_, _ = fmt.Fprintf(w, `<text x="%d" y="%d" font-size="%d" fill="#d8d9da" font-weight="bold">%s</text>`+"\n", x+8, y+17, titleSz, esc(p.Title))
		meta := p.Type
		if u := p.FieldConfig.Defaults.Unit; u != "" {
			meta += " · unit " + u
		}
		_, _ = fmt.Fprintf(w, `<text x="%d" y="%d" font-size="%d" fill="#8e8e8e">%s</text>`+"\n", x+8, y+31, metaSz, esc(meta))
		queries(w, p, x+8, y+46, pw-16, y+ph-6)
	}
	_, _ = fmt.Fprintln(w, "</svg>")
}

// queries writes p's queries, each prefixed by its legend, wrapped to the
// panel's width; what does not fit above limit ends in an ellipsis, so
// that no text overflows into the next panel.
func queries(w io.Writer, p panel, x, y, width, limit int) {
	perLine := max(int(float64(width)/charW), 10)
	var lines []string
	for _, t := range p.Targets {
		text := t.Expr
		if t.LegendFormat != "" {
			text = t.LegendFormat + ": " + text
		}
		lines = append(lines, wrap(text, perLine)...)
	}
	fit := (limit - y + lineH) / lineH
	if fit < 1 {
		return
	}
	if len(lines) > fit {
		lines = lines[:fit]
		last := []rune(lines[fit-1])
		if len(last) > perLine-1 {
			last = last[:perLine-1]
		}
		lines[fit-1] = string(last) + "…"
	}
	for i, l := range lines {
		_, _ = fmt.Fprintf(w, `<text x="%d" y="%d" font-size="%d" fill="#73bf69" font-family="DejaVu Sans Mono, Menlo, monospace" xml:space="preserve">%s</text>`+"\n",
			x, y+i*lineH, exprSz, esc(l))
	}
}

// wrap cuts s into lines of at most n runes, at a space or after a comma
// or closing bracket where one is near, as PromQL reads best.
func wrap(s string, n int) []string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	var lines []string
	for len(r) > n {
		cut := n
		for i := n; i > n*2/3; i-- {
			if c := r[i-1]; c == ' ' || c == ',' || c == ')' || c == '}' {
				cut = i
				break
			}
		}
		lines = append(lines, strings.TrimRight(string(r[:cut]), " "))
		r = r[cut:]
		for len(r) > 0 && r[0] == ' ' {
			r = r[1:]
		}
	}
	if len(r) > 0 {
		lines = append(lines, string(r))
	}
	return lines
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
