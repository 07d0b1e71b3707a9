// Command publishlocal writes every module of the redlimit repository at one
// version as a Go module proxy directory, as a release at that version
// would publish them, so that a user's module can be built against them
// with GOPROXY=file://DIR before anything is tagged:
//
//	GOWORK=off go -C tools run ./cmd/publishlocal -root .. v0.1.0 /tmp/proxy
//
// It copies the files of the working tree that git would commit (tracked
// and untracked, less the ignored ones; every file when root is not a git
// checkout) to a temporary directory, so the checkout is never modified.
// There it sets each go.mod's requirements on the repository's own modules,
// and .ci/VERSION, to the version (as .ci/release does; replace directives
// stay: users ignore them), gives a nested module without a LICENSE the
// root's (as the go command does when it zips a module from git), and
// writes, for each module, under DIR/<escaped module path>/@v/:
//
//	list            the versions, one a line (the version is added)
//	VERSION.info    {"Version": ..., "Time": ...}
//	VERSION.mod     the module's go.mod
//	VERSION.zip     made by golang.org/x/mod/zip.CreateFromDir, which leaves
//	                out nested modules, VCS directories and irregular files
//	                and enforces the module zip rules
//
// Paths and versions are escaped with golang.org/x/mod/module.EscapePath and
// EscapeVersion. It also writes DIR/go.sum, the go.sum lines of what it
// published (h1: hashes of each zip and go.mod), so a check can prove that a
// user's build used exactly these modules. The tools module is left out.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"

	"github.com/redlimit/redlimit/tools/internal/repomod"
)

func main() {
	root := flag.String("root", ".", "the repository's root directory")
	infoTime := flag.String("time", "", "the Time of each .info file, RFC 3339 (default: now)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: publishlocal [-root DIR] [-time RFC3339] VERSION DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	version, out := flag.Arg(0), flag.Arg(1)
	t := time.Now().UTC().Truncate(time.Second)
	if *infoTime != "" {
		var err error
		if t, err = time.Parse(time.RFC3339, *infoTime); err != nil {
			fatal(fmt.Errorf("-time: %w", err))
		}
	}
	if err := run(*root, version, out, t); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "publishlocal:", err)
	os.Exit(1)
}

func run(root, version, out string, t time.Time) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	mods, err := repomod.Discover(root)
	if err != nil {
		return err
	}
	if err := repomod.CheckVersion(mods, version); err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "redlimit-publishlocal-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	tree := filepath.Join(tmp, "tree")
	n, err := copyTree(root, tree, out)
	if err != nil {
		return err
	}
	fmt.Printf("copied %d files of %s to a temporary tree\n", n, root)

	// The copy's modules are the ones published (the same as root's, unless
	// the tree changed in between).
	if mods, err = repomod.Discover(tree); err != nil {
		return err
	}
	changes, err := repomod.SetAll(tree, mods, version, true)
	if err != nil {
		return err
	}
	for _, m := range mods {
		for _, c := range changes[m.Dir] {
			fmt.Printf("  %s/go.mod: require %s %s -> %s\n", m.Dir, c.Path, c.From, c.To)
		}
	}
	if old, changed, err := repomod.SetVersionFile(tree, version, true); err != nil {
		return err
	} else if changed {
		fmt.Printf("  %s: %s -> %s\n", repomod.VersionFile, old, version)
	}
	if err := shareLicense(tree, mods); err != nil {
		return err
	}

	var sums []string
	for _, m := range mods {
		s, err := publish(m, filepath.Join(tree, filepath.FromSlash(m.Dir)), version, out, t)
		if err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		sums = append(sums, s...)
	}
	if err := mergeSums(filepath.Join(out, "go.sum"), sums); err != nil {
		return err
	}
	fmt.Printf("published %d modules at %s to %s\n", len(mods), version, out)
	return nil
}

// copyTree copies the files of root that git would commit to dst and
// returns how many. It leaves out anything under skip (the output
// directory, should it lie inside root).
func copyTree(root, dst, skip string) (int, error) {
	files, err := gitFiles(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rel := range files {
		src := filepath.Join(root, filepath.FromSlash(rel))
		if src == skip || strings.HasPrefix(src, skip+string(filepath.Separator)) {
			continue
		}
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		} else if err != nil {
			return 0, err
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return 0, err
		}
		switch {
		case info.Mode().IsRegular():
			if err := copyFile(src, target, info.Mode().Perm()); err != nil {
				return 0, err
			}
			n++
		case info.Mode()&fs.ModeSymlink != 0:
			// Kept, so that the zip leaves it out just as it would in git.
			link, err := os.Readlink(src)
			if err != nil {
				return 0, err
			}
			if err := os.Symlink(link, target); err != nil {
				return 0, err
			}
		}
		// Directories (git submodules) and other irregular files: not copied.
	}
	return n, nil
}

// gitFiles lists the files git would commit under root: tracked and
// untracked, less the ignored ones; with no git checkout, every file
// outside .git.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err == nil {
		var files []string
		for f := range strings.SplitSeq(string(outb), "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		return slices.Compact(files), nil
	}
	inside := exec.Command("git", "rev-parse", "--is-inside-work-tree")
	inside.Dir = root
	if inside.Run() == nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, stderr.String())
	}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // read only
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy's error is the one to report
		return err
	}
	return out.Close()
}

// shareLicense gives each nested module without a LICENSE file the root's,
// as the go command does when it makes a module zip from a git repository.
func shareLicense(tree string, mods []repomod.Module) error {
	lic := filepath.Join(tree, "LICENSE")
	if _, err := os.Stat(lic); err != nil {
		return nil
	}
	for _, m := range mods[1:] {
		dst := filepath.Join(tree, filepath.FromSlash(m.Dir), "LICENSE")
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := copyFile(lic, dst, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// publish writes module m, whose files are in src, at version v into the
// proxy directory out, and returns its go.sum lines.
func publish(m repomod.Module, src, v, out string, t time.Time) ([]string, error) {
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return nil, err
	}
	escVersion, err := module.EscapeVersion(v)
	if err != nil {
		return nil, err
	}
	vdir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return nil, err
	}
	mv := module.Version{Path: m.Path, Version: v}

	checked, err := modzip.CheckDir(src)
	if err != nil {
		for _, f := range checked.Invalid {
			fmt.Fprintf(os.Stderr, "  invalid in the module zip: %s: %v\n", f.Path, f.Err)
		}
		return nil, err
	}

	// The zip, written beside its final name and then renamed.
	zipFile := filepath.Join(vdir, escVersion+".zip")
	tmpZip, err := os.CreateTemp(vdir, escVersion+".zip.tmp-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(tmpZip.Name()) }() // gone already once renamed
	if err := modzip.CreateFromDir(tmpZip, mv, src); err != nil {
		_ = tmpZip.Close() // CreateFromDir's error is the one to report
		return nil, err
	}
	if err := tmpZip.Close(); err != nil {
		return nil, err
	}
	if _, err := modzip.CheckZip(mv, tmpZip.Name()); err != nil {
		return nil, err
	}
	if err := os.Rename(tmpZip.Name(), zipFile); err != nil {
		return nil, err
	}

	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(vdir, escVersion+".mod"), gomod, 0o644); err != nil {
		return nil, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{v, t.Format(time.RFC3339)})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(vdir, escVersion+".info"), append(info, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := addToList(filepath.Join(vdir, "list"), v); err != nil {
		return nil, err
	}

	zipHash, err := dirhash.HashZip(zipFile, dirhash.Hash1)
	if err != nil {
		return nil, err
	}
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	})
	if err != nil {
		return nil, err
	}
	var omitted []string
	for _, f := range checked.Omitted {
		rel, err := filepath.Rel(src, f.Path)
		if err != nil {
			rel = f.Path
		}
		omitted = append(omitted, filepath.ToSlash(rel))
	}
	note := ""
	if len(omitted) > 0 {
		note = "; left out: " + strings.Join(omitted, " ")
	}
	fmt.Printf("  %s@%s: %d files, %s%s\n", m.Path, v, len(checked.Valid), zipHash, note)
	return []string{
		fmt.Sprintf("%s %s %s", m.Path, v, zipHash),
		fmt.Sprintf("%s %s/go.mod %s", m.Path, v, modHash),
	}, nil
}

// addToList adds v to the proxy's list file, kept sorted and unique.
func addToList(file, v string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, v) {
		versions = append(versions, v)
	}
	semver.Sort(versions)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// mergeSums writes lines into the go.sum file at file, replacing the lines
// of the same module versions from an earlier run.
func mergeSums(file string, lines []string) error {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	key := func(line string) string {
		f := strings.Fields(line)
		if len(f) < 2 {
			return line
		}
		return f[0] + " " + f[1]
	}
	fresh := map[string]bool{}
	for _, l := range lines {
		fresh[key(l)] = true
	}
	all := slices.Clone(lines)
	for l := range strings.SplitSeq(string(data), "\n") {
		if l != "" && !fresh[key(l)] {
			all = append(all, l)
		}
	}
	slices.Sort(all)
	return os.WriteFile(file, []byte(strings.Join(all, "\n")+"\n"), 0o644)
}
