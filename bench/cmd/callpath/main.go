// Command callpath names the functions of the project one request runs
// through, from two coverage profiles (go test -coverprofile, textfmt) of
// the same program: one that served only the warm-up requests, and one
// that served N requests more. A block whose counter grew by about N, or a
// multiple of it, between the two is on the request's path; each is
// credited to the innermost function around it (a closure counts as a
// function of its own: the middleware is one), found by parsing the
// source. bench/callpath.sh runs it; see there.
//
//	callpath [-root DIR] [-case NAME] -n N BASE MEASURED
//
// Work that does not happen once per request (start-up work racing the
// warm-up, background checks) grows some counters by less than N, or by
// an amount N does not divide: with N large, rounding leaves it out, and
// the count of such blocks is printed, so a path that is not steady shows.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const module = "github.com/redlimit/redlimit"

type block struct {
	file                     string // import path of the package + file name
	line0, col0, line1, col1 int
	stmts                    int
}

func main() {
	root := flag.String("root", ".", "the repository's root directory, where "+module+" lives")
	name := flag.String("case", "request", "the name to print the result under")
	n := flag.Int64("n", 0, "how many more requests MEASURED served than BASE")
	flag.Parse()
	if flag.NArg() != 2 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: callpath [-root DIR] [-case NAME] -n N BASE MEASURED")
		os.Exit(2)
	}
	base, measured := mustRead(flag.Arg(0)), mustRead(flag.Arg(1))
	delta := map[block]int64{} // runs per request
	var uneven []string
	for b, c := range measured {
		c0, ok := base[b]
		if !ok {
			fatalf("%s: block %s:%d.%d is in %s, not in %s: not profiles of the same program", *name, b.file, b.line0, b.col0, flag.Arg(1), flag.Arg(0))
		}
		d := c - c0
		if d%*n != 0 { // negative too: BASE's warm-up raced its start-up otherwise
			uneven = append(uneven, fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, module+"/"), b.line0))
		}
		if per := (d + *n/2) / *n; per > 0 {
			delta[b] = per
		}
	}
	steady := " (every block ran a whole number of times per request)"
	if len(uneven) > 0 {
		sort.Strings(uneven)
		steady = fmt.Sprintf(" (%d blocks ran other than a whole number of times per request, rounded: %s)", len(uneven), strings.Join(uneven, " "))
	}

	funcs := map[string]*fn{} // by file + start
	files := map[string]*[]*fn{}
	for b, d := range delta {
		if !strings.HasPrefix(b.file, module+"/") {
			continue
		}
		fs, ok := files[b.file]
		if !ok {
			fs = new([]*fn)
			*fs = parse(filepath.Join(*root, strings.TrimPrefix(b.file, module+"/")))
			files[b.file] = fs
		}
		f := innermost(*fs, b)
		if f == nil {
			fatalf("%s: no function around block %s:%d.%d", *name, b.file, b.line0, b.col0)
		}
		key := b.file + ":" + strconv.Itoa(f.line)
		r, ok := funcs[key]
		if !ok {
			r = &fn{name: f.name, line: f.line, file: b.file}
			funcs[key] = r
		}
		r.blocks++
		r.stmts += b.stmts
		r.runs = max(r.runs, d)
	}

	list := make([]*fn, 0, len(funcs))
	hit := map[string]bool{}
	closures := 0
	for _, f := range funcs {
		list = append(list, f)
		hit[f.file] = true
		if f.closure() {
			closures++
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].file != list[j].file {
			return list[i].file < list[j].file
		}
		return list[i].line < list[j].line
	})
	fmt.Printf("%s: %d functions in %d files (%d of them closures)%s\n", *name, len(list), len(hit), closures, steady)
	for _, f := range list {
		fmt.Printf("  %s:%d\t%s\t%d blocks, %d statements, x%d\n",
			strings.TrimPrefix(f.file, module+"/"), f.line, f.name, f.blocks, f.stmts, f.runs)
	}
}

// fn is a function (a declaration or a closure) and, once the request ran
// through it, what of it ran: the blocks, their statements, and the most
// times any of them ran.
type fn struct {
	name, file     string
	line           int
	l0, c0, l1, c1 int // its body, braces included
	blocks, stmts  int
	runs           int64
}

func (f *fn) closure() bool { return strings.Contains(f.name, ".func") }

// parse lists the functions of a Go file, closures named like the
// compiler names them (Outer.func1, Outer.func1.1).
func parse(path string) []*fn {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		fatalf("%v", err)
	}
	var out []*fn
	add := func(name string, body *ast.BlockStmt) {
		p0, p1 := fset.Position(body.Lbrace), fset.Position(body.Rbrace)
		out = append(out, &fn{name: name, line: p0.Line, l0: p0.Line, c0: p0.Column, l1: p1.Line, c1: p1.Column + 1})
	}
	// lits names the closures directly inside n after parent.
	var lits func(parent string, n ast.Node)
	lits = func(parent string, n ast.Node) {
		i := 0
		ast.Inspect(n, func(m ast.Node) bool {
			lit, ok := m.(*ast.FuncLit)
			if !ok || m == n {
				return true
			}
			i++
			name := parent + "." + strconv.Itoa(i)
			if !strings.Contains(parent, ".func") {
				name = parent + ".func" + strconv.Itoa(i)
			}
			add(name, lit.Body)
			lits(name, lit)
			return false
		})
	}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				name = recv(d.Recv.List[0].Type) + "." + name
			}
			add(name, d.Body)
			lits(name, d.Body)
		case *ast.GenDecl:
			lits("glob.", d)
		}
	}
	return out
}

func recv(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "(*" + strings.Trim(recv(e.X), "()") + ")"
	case *ast.IndexExpr:
		return recv(e.X)
	case *ast.IndexListExpr:
		return recv(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// innermost is the smallest function whose body holds b.
func innermost(fs []*fn, b block) *fn {
	var best *fn
	for _, f := range fs {
		if !before(f.l0, f.c0, b.line0, b.col0) || !before(b.line1, b.col1, f.l1, f.c1) {
			continue
		}
		if best == nil || before(best.l0, best.c0, f.l0, f.c0) {
			best = f
		}
	}
	return best
}

func before(l0, c0, l1, c1 int) bool { return l0 < l1 || l0 == l1 && c0 <= c1 }

// mustRead reads a textfmt coverage profile: after the mode line, lines
// "file:l0.c0,l1.c1 stmts count", a block on several lines when several
// test binaries wrote it, their counts summed.
func mustRead(path string) map[block]int64 {
	f, err := os.Open(path)
	if err != nil {
		fatalf("%v", err)
	}
	defer func() { _ = f.Close() }()
	out := map[block]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") || line == "" {
			continue
		}
		var b block
		var n int64
		colon := strings.LastIndexByte(line, ':')
		if colon < 0 {
			fatalf("%s: bad line %q", path, line)
		}
		b.file = line[:colon]
		if _, err := fmt.Sscanf(line[colon+1:], "%d.%d,%d.%d %d %d", &b.line0, &b.col0, &b.line1, &b.col1, &b.stmts, &n); err != nil {
			fatalf("%s: bad line %q: %v", path, line, err)
		}
		out[b] += n
	}
	if err := sc.Err(); err != nil {
		fatalf("%s: %v", path, err)
	}
	return out
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "callpath: "+format+"\n", args...)
	os.Exit(1)
}
