package examples_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeRecipesInQuickStart backs the README's "each fragment below
// runs inside the Quick start's main": each Go fragment of its Recipes
// (but the test function) is put into that program's main, before it
// starts serving, with what the README says it is given (ctx, and the
// imports it names), and compiled. Inside functions of their own, given
// every variable they use (TestReadmeSnippetsCompile), fragments that
// could not run there ("undefined: ctx", "undefined: time") passed.
func TestReadmeRecipesInQuickStart(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(text)
	start, end := strings.Index(readme, "\n## Recipes\n"), strings.Index(readme, "\n## Choosing an algorithm\n")
	if start < 0 || end < start {
		t.Fatal("README.md: no Recipes section before Choosing an algorithm")
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```")
	var quick string
	for _, m := range block.FindAllStringSubmatch(readme[:start], -1) {
		if strings.HasPrefix(m[1], "package main\n") {
			quick = m[1]
			break
		}
	}
	serve := "\tlog.Fatal(http.ListenAndServe("
	if !strings.Contains(quick, serve) || !strings.Contains(quick, "\nimport (\n") {
		t.Fatalf("README.md: the Quick start's program has no %q or import block:\n%s", serve, quick)
	}
	if !strings.Contains(readme[start:end], "`ctx := context.Background()`") {
		t.Error("README.md's Recipes do not say the fragments are given ctx")
	}
	files := map[string]string{}
	for i, m := range block.FindAllStringSubmatch(readme[start:end], -1) {
		frag := m[1]
		if strings.HasPrefix(frag, "func ") || strings.HasPrefix(frag, "package ") {
			continue
		}
		var imports strings.Builder
		for _, name := range slices.Sorted(maps.Keys(readmeImports)) {
			used := regexp.MustCompile(`\b`+name+`\.`).MatchString(frag) || name == "context"
			if used && !strings.Contains(quick, fmt.Sprintf("%q", readmeImports[name])) {
				fmt.Fprintf(&imports, "\t%s %q\n", name, readmeImports[name])
			}
		}
		body := "\tctx := context.Background()\n\t_ = ctx\n\t{\n" + frag + "\t}\n"
		prog := strings.Replace(quick, "\nimport (\n", "\nimport (\n"+imports.String(), 1)
		prog = strings.Replace(prog, serve, body+serve, 1)
		files[fmt.Sprintf("recipe%d", i+1)] = prog
	}
	if len(files) < 5 {
		t.Fatalf("found %d recipes, want the README's", len(files))
	}
	vetPrograms(t, ".", files)
}
