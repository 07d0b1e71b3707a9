// Command apisurface counts the exported names of the redlimit packages: a
// package's exported constants, variables, functions and types, and the
// exported methods of its exported types ("names"); and, beside them, the
// same with the exported fields of its exported structs ("with fields"). It is how the
// project tracks what a user must read, from one release to the next:
//
//	GOWORK=off go -C tools run ./cmd/apisurface -root ..
//
// Test files, internal packages, examples, benchmarks and tools are left
// out: they are not the library's surface.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	counts, err := surface(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apisurface:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(counts))
	var total count
	for dir, c := range counts {
		dirs = append(dirs, dir)
		total.names += c.names
		total.fields += c.fields
	}
	sort.Strings(dirs)
	fmt.Printf("%-14s %6s %12s\n", "package", "names", "with fields")
	for _, dir := range dirs {
		c := counts[dir]
		fmt.Printf("%-14s %6d %12d\n", dir, c.names, c.names+c.fields)
	}
	fmt.Printf("%-14s %6d %12d (%d packages)\n", "total", total.names, total.names+total.fields, len(dirs))
}

type count struct{ names, fields int }

// surface maps each library package's directory to its count of exported
// names.
func surface(root string) (map[string]count, error) {
	counts := map[string]count{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipped(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.Dir(rel)
		if dir == "." {
			dir = "(root)"
		}
		c := counts[dir]
		names, fields := exported(f)
		c.names += names
		c.fields += fields
		counts[dir] = c
		return nil
	})
	return counts, err
}

func skipped(rel string) bool {
	base := filepath.Base(rel)
	return rel != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") ||
		base == "internal" || base == "testdata" || base == "examples" || base == "bench" || base == "tools" || base == "docs")
}

// exported counts a file's exported declarations with the methods of its
// exported types, and apart, the exported fields of its exported structs.
func exported(f *ast.File) (n, fields int) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					n++
					if st, ok := s.Type.(*ast.StructType); ok {
						for _, field := range st.Fields.List {
							for _, name := range field.Names {
								if name.IsExported() {
									fields++
								}
							}
						}
					}
				}
			}
		}
	}
	return n, fields
}

func exportedRecv(recv *ast.FieldList) bool {
	t := recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
