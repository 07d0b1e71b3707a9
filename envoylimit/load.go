package envoylimit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// ruleset is a loaded configuration: its domains, and the fingerprint of
// the files it was read from.
type ruleset struct {
	domains map[string]*domain
	stamp   string
}

func (rs *ruleset) names() []string {
	names := make([]string, 0, len(rs.domains))
	for n := range rs.domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// load reads the configuration at path: one file, or each .yaml and .yml
// file of a directory. Every error names its file (and line).
func load(path string, m *metrics) (*ruleset, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	stamp, err := stampOf(files)
	if err != nil {
		return nil, err
	}
	rs := &ruleset{domains: map[string]*domain{}, stamp: stamp}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if gone(f, err) {
			return nil, fmt.Errorf("%s: %w", f, errChanging)
		}
		if err != nil {
			return nil, err
		}
		fd, err := parseFile(data)
		if err == nil {
			var d *domain
			if d, err = compileDomain(fd, f, m); err == nil {
				if other := rs.domains[d.name]; other != nil {
					err = fmt.Errorf("line %d: domain %q is configured in %s too", fd.line, d.name, other.file)
				}
				rs.domains[d.name] = d
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return rs, nil
}

// configFiles lists the files of the configuration at path, sorted.
func configFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			continue
		}
		// A Kubernetes ConfigMap's files are symbolic links: follow them. One
		// that leads nowhere is an error: skipped, its domain would go
		// unlimited without a word.
		fi, err := os.Stat(filepath.Join(path, n))
		if gone(filepath.Join(path, n), err) {
			return nil, fmt.Errorf("%s: %w", filepath.Join(path, n), errChanging)
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() {
			files = append(files, filepath.Join(path, n))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .yaml or .yml file", path)
	}
	return files, nil
}

// fingerprint is what changes when the configuration's files do: their
// names, sizes, modification times and inodes.
func fingerprint(path string) (string, error) {
	files, err := configFiles(path)
	if err != nil {
		return "", err
	}
	return stampOf(files)
}

func stampOf(files []string) (string, error) {
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if gone(f, err) {
			return "", fmt.Errorf("%s: %w", f, errChanging)
		}
		if err != nil {
			return "", err
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%s %d %d %d\n", f, fi.Size(), fi.ModTime().UnixNano(), ino)
	}
	if b.Len() == 0 {
		return "", errors.New("no configuration file")
	}
	return b.String(), nil
}

// errChanging is a look that met the directory changing under it: a
// file listed a moment ago is gone. That says nothing about the
// configuration, and a configuration read half before and half after
// the change could lack a domain that is only being rewritten: the last
// good one stays, nothing is counted, and the next look reads it whole.
var errChanging = errors.New("removed while the configuration was read")

// gone reports whether err says that file, listed a moment ago, has been
// removed since. A link that leads nowhere is still there (Lstat finds
// it): that is an error of the configuration.
func gone(file string, err error) bool {
	if !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_, err = os.Lstat(file)
	return errors.Is(err, fs.ErrNotExist)
}
