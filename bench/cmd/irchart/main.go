// Command irchart draws the counted table of bench/instructions.sh as an
// SVG bar chart: Redis instructions per decision, ours beside its peer,
// for a lone decision and a batched one on many keys. It reads the
// markdown table TestInstructions writes (BENCH_TABLE_OUT) and uses the
// standard library only.
//
//	BENCH_TABLE_OUT=/tmp/ir.md bash bench/instructions.sh
//	go run ./cmd/irchart -in /tmp/ir.md -out instructions.svg   (in bench/)
package main

import (
	"bufio"
	"flag"
	"fmt"
	"html"
	"log"
	"os"
	"strconv"
	"strings"
)

// bar is one bar: a contender in a cell.
type bar struct {
	label, cell, contender string
	ours                   bool
}

// bars are the chart's, in order, in pairs: ours, then its peer.
var bars = []bar{
	{"token bucket, lone", "g=1/keys=1", "ours/plain", true},
	{"redis_rate (GCRA), lone", "g=1/keys=1", "redis_rate", false},
	{"fixed window, lone", "g=1/keys=1", "ours/fixed_window/plain", true},
	{"ulule, lone", "g=1/keys=1", "ulule", false},
	{"token bucket, 16 goroutines, 1000 keys", "g=16/keys=1000", "ours/batched", true},
	{"redis_rate, 16 goroutines, 1000 keys", "g=16/keys=1000", "redis_rate", false},
	{"fixed window, 16 goroutines, 1000 keys", "g=16/keys=1000", "ours/fixed_window", true},
	{"ulule, 16 goroutines, 1000 keys", "g=16/keys=1000", "ulule", false},
	{"fixed window, a window starts", "window starts", "ours/fixed_window/plain", true},
	{"ulule, a window starts", "window starts", "ulule", false},
}

func main() {
	in := flag.String("in", "", "the markdown table of TestInstructions")
	out := flag.String("out", "instructions.svg", "the SVG to write")
	title := flag.String("title", "Redis instructions per decision (callgrind, bench/instructions.sh)", "the chart's title")
	flag.Parse()
	ir, err := read(*in)
	if err != nil {
		log.Fatal(err)
	}
	var most float64
	for _, b := range bars {
		v, ok := ir[b.contender+"|"+b.cell]
		if !ok {
			log.Fatalf("%s: no %s in %s", *in, b.contender, b.cell)
		}
		most = max(most, v)
	}
	const left, width, row, top = 300, 420, 26, 44
	var s strings.Builder
	h := top + row*len(bars) + 30
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", left+width+90, h)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&s, `<text x="10" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", html.EscapeString(*title))
	for i, b := range bars {
		v := ir[b.contender+"|"+b.cell]
		y := top + i*row
		colour := "#9aa5b1"
		if b.ours {
			colour = "#d9534f"
		}
		w := int(v / most * width)
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+15, html.EscapeString(b.label))
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%d" height="18" fill="%s"/>`+"\n", left, y+2, w, colour)
		note := fmt.Sprintf("%.1fk", v/1000)
		if b.ours {
			peer := ir[bars[i+1].contender+"|"+bars[i+1].cell]
			note += fmt.Sprintf(" (%.2f ×)", v/peer)
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d">%s</text>`+"\n", left+w+6, y+15, note)
	}
	fmt.Fprintf(&s, `<text x="10" y="%d" font-size="11" fill="#555">red: redlimit; grey: its peer; (×): ours ÷ peer. Fewer is cheaper.</text>`+"\n", h-10)
	s.WriteString("</svg>\n")
	if err := os.WriteFile(*out, []byte(s.String()), 0o644); err != nil {
		log.Fatal(err)
	}
}

// read returns the instructions per decision of each "contender|cell".
func read(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "|")
		if len(cols) < 6 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(cols[4]), 64)
		if err != nil {
			continue // the header
		}
		out[strings.TrimSpace(cols[1])+"|"+strings.TrimSpace(cols[2])] = v
	}
	return out, sc.Err()
}
