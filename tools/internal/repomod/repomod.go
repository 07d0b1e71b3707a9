// Package repomod finds the Go modules of the redlimit repository and sets
// the versions at which they require each other, for the release script
// (.ci/release, through cmd/modversions) and for cmd/publishlocal.
//
// The repository is a multi-module repository: the root module
// github.com/redlimit/redlimit and nested modules in subdirectories, each
// with the module path root + "/" + its directory, so that the Go tooling
// finds module DIR at version vX.Y.Z under the git tag DIR/vX.Y.Z.
package repomod

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// ToolsDir is the directory of the repository's tools module (linters and
// these release helpers), which is not part of a release.
const ToolsDir = "tools"

// VersionFile holds the version that the modules require each other at:
// that of the last release, or the one being prepared. A release sets it
// along with the go.mod files, and publishlocal does the same in its copy,
// since the file is part of the root module's zip.
const VersionFile = ".ci/VERSION"

// SetVersionFile writes v to root's VersionFile (with write false, only
// reports) and returns the version it held before ("" if none) and whether
// it changes.
func SetVersionFile(root, v string, write bool) (string, bool, error) {
	file := filepath.Join(root, filepath.FromSlash(VersionFile))
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	old := strings.TrimSpace(string(data))
	want := v + "\n"
	if string(data) == want {
		return old, false, nil
	}
	if write {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return "", false, err
		}
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			return "", false, err
		}
	}
	return old, true, nil
}

// Module is one module of the repository.
type Module struct {
	Dir  string // slash-separated, relative to the repository root; "." for the root
	Path string // module path
}

// Tag is the git tag that carries version v of m.
func (m Module) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// GoMod is the path of m's go.mod file under root.
func (m Module) GoMod(root string) string {
	return filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod")
}

// Discover returns the modules under root, the root module first and then
// the nested ones sorted by directory, leaving out the tools module. Like
// the go command, it skips directories named testdata or vendor and those
// whose names start with "." or "_". Each nested module's path must be the
// root module's path + "/" + its directory, the layout the tags rely on.
func Discover(root string) ([]Module, error) {
	rootPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("root module: %w", err)
	}
	mods := []Module{{Dir: ".", Path: rootPath}}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || rel == ToolsDir {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		mp, err := modulePath(filepath.Join(p, "go.mod"))
		if err != nil {
			return err
		}
		if want := rootPath + "/" + rel; mp != want {
			return fmt.Errorf("%s/go.mod: module %s, want %s (the tag %s/vX.Y.Z names module %s)", rel, mp, want, rel, want)
		}
		mods = append(mods, Module{Dir: rel, Path: mp})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods[1:], func(a, b Module) int { return strings.Compare(a.Dir, b.Dir) })
	return mods, nil
}

func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	p := modfile.ModulePath(data)
	if p == "" {
		return "", fmt.Errorf("%s: no module directive", gomod)
	}
	return p, nil
}

// CheckVersion reports whether v can be the version of every module in mods:
// a canonical semantic version (vMAJOR.MINOR.PATCH, optionally -PRERELEASE,
// no +BUILD), not a pseudo-version, and with the major version the module
// paths allow (v0 or v1 unless the paths end in /vN).
func CheckVersion(mods []Module, v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH[-PRERELEASE]", v)
	}
	if module.IsPseudoVersion(v) {
		return fmt.Errorf("version %q is a pseudo-version", v)
	}
	for _, m := range mods {
		if err := module.Check(m.Path, v); err != nil {
			return err
		}
	}
	return nil
}

// Change is one requirement SetRequirements changed.
type Change struct {
	Path     string // the required module
	From, To string // versions
}

// SetRequirements rewrites the go.mod file data (named file, for errors) so
// that each of its require lines for a module in mods names version v. It
// touches no other line (replace directives stay) and adds no requirement.
// It returns the new content and the changes, none if it already agreed.
func SetRequirements(file string, data []byte, mods []Module, v string) ([]byte, []Change, error) {
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, nil, err
	}
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.Path] = true
	}
	var changes []Change
	for _, r := range f.Require {
		if ours[r.Mod.Path] && r.Mod.Version != v {
			changes = append(changes, Change{Path: r.Mod.Path, From: r.Mod.Version, To: v})
		}
	}
	if len(changes) == 0 {
		return data, nil, nil
	}
	for _, c := range changes {
		if err := f.AddRequire(c.Path, v); err != nil {
			return nil, nil, err
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, nil, err
	}
	return out, changes, nil
}

// SetAll applies SetRequirements to the go.mod file of every module in mods
// under root. With write false it only reports what it would change. It
// returns the changes by module directory.
func SetAll(root string, mods []Module, v string, write bool) (map[string][]Change, error) {
	all := map[string][]Change{}
	for _, m := range mods {
		file := m.GoMod(root)
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		out, changes, err := SetRequirements(path.Join(m.Dir, "go.mod"), data, mods, v)
		if err != nil {
			return nil, err
		}
		if len(changes) == 0 {
			continue
		}
		all[m.Dir] = changes
		if write {
			info, err := os.Stat(file)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(file, out, info.Mode().Perm()); err != nil {
				return nil, err
			}
		}
	}
	return all, nil
}
