// Command modversions lists the redlimit repository's modules and sets or
// checks the version at which they require each other. .ci/release and
// .ci/run use it; run it from the tools module:
//
//	GOWORK=off go -C tools run ./cmd/modversions -root .. list
//	GOWORK=off go -C tools run ./cmd/modversions -root .. tags v0.1.0
//	GOWORK=off go -C tools run ./cmd/modversions -root .. set [-n] v0.1.0
//	GOWORK=off go -C tools run ./cmd/modversions -root .. check v0.1.0
//
// list prints "DIR<TAB>MODULE PATH" for each module (the tools module left
// out); tags prints the git tag of each module at the version, one a line
// (v0.1.0, ginlimit/v0.1.0, ...); set rewrites every go.mod's require lines
// for the repository's own modules, and .ci/VERSION, to the version (with -n
// it only prints what it would change); check exits 1 unless they already
// name it. Every verb but list first checks that the version can be a
// release version.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/redlimit/redlimit/tools/internal/repomod"
)

func main() {
	root := flag.String("root", ".", "the repository's root directory")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: modversions [-root DIR] list | tags VERSION | set [-n] VERSION | check VERSION")
		flag.PrintDefaults()
	}
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	mods, err := repomod.Discover(*root)
	if err != nil {
		fatal(err)
	}
	verb, args := args[0], args[1:]
	dryRun := false
	if verb == "set" && len(args) > 0 && args[0] == "-n" {
		dryRun, args = true, args[1:]
	}
	if verb == "list" {
		if len(args) != 0 {
			flag.Usage()
			os.Exit(2)
		}
		for _, m := range mods {
			fmt.Printf("%s\t%s\n", m.Dir, m.Path)
		}
		return
	}
	if len(args) != 1 {
		flag.Usage()
		os.Exit(2)
	}
	v := args[0]
	if err := repomod.CheckVersion(mods, v); err != nil {
		fatal(err)
	}
	switch verb {
	case "tags":
		for _, m := range mods {
			fmt.Println(m.Tag(v))
		}
	case "set", "check":
		changes, err := repomod.SetAll(*root, mods, v, verb == "set" && !dryRun)
		if err != nil {
			fatal(err)
		}
		dirs := make([]string, 0, len(changes))
		for d := range changes {
			dirs = append(dirs, d)
		}
		slices.Sort(dirs)
		for _, d := range dirs {
			for _, c := range changes[d] {
				fmt.Printf("%s/go.mod: require %s %s -> %s\n", d, c.Path, c.From, c.To)
			}
		}
		old, fileChanges, err := repomod.SetVersionFile(*root, v, verb == "set" && !dryRun)
		if err != nil {
			fatal(err)
		}
		if fileChanges {
			if old == "" {
				old = "(none)"
			}
			fmt.Printf("%s: %s -> %s\n", repomod.VersionFile, old, v)
		}
		switch {
		case verb == "check" && (len(dirs) > 0 || fileChanges):
			fatal(fmt.Errorf("the lines above do not name %s (run .ci/release, or modversions set %s)", v, v))
		case len(dirs) == 0 && !fileChanges:
			fmt.Printf("every requirement on a redlimit module, and %s, name %s\n", repomod.VersionFile, v)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "modversions:", err)
	os.Exit(1)
}
