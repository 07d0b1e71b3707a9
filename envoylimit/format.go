package envoylimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML of one file, read by walking yaml.Node so that every error
// names its line, and a key this format does not know is refused as
// envoyproxy/ratelimit refuses it (a misspelt "ratelimit:" would otherwise
// leave a descriptor unlimited without a word).

type fileDomain struct {
	name        string
	line        int
	descriptors []fileDescriptor
}

type fileDescriptor struct {
	line                       int
	key, value                 string
	limit                      *fileLimit
	descriptors                []fileDescriptor
	shadow, detailed, toMetric bool
	shared                     bool
}

type fileLimit struct {
	line      int
	unit      string
	rate      uint32
	unlimited bool
	name      string
	replaces  []string
	// Our extensions: optional, so that envoyproxy/ratelimit's files load.
	algorithm string
	burst     uint64
	calendar  string
	overdraft bool
}

var (
	rootKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	limitKeys = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "calendar", "overdraft"}
)

// parseFile reads one file of envoyproxy/ratelimit's format.
func parseFile(data []byte) (fileDomain, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return fileDomain{}, errors.New("empty file: want a domain and its descriptors")
		}
		return fileDomain{}, errors.New(strings.TrimPrefix(err.Error(), "yaml: ")) // "line N: ...", as ours
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return fileDomain{}, errors.New("more than one YAML document: want one domain per file")
	}
	root := doc.Content[0]
	f, err := fields(root, "the file", rootKeys)
	if err != nil {
		return fileDomain{}, err
	}
	d := fileDomain{line: root.Line}
	if err := scalar(f["domain"], "domain", &d.name); err != nil {
		return d, err
	}
	if d.name == "" {
		return d, at(root, "the file has no domain")
	}
	d.descriptors, err = descriptors(f["descriptors"])
	return d, err
}

func descriptors(n *yaml.Node) ([]fileDescriptor, error) {
	if n == nil || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, at(n, "descriptors: want a list")
	}
	out := make([]fileDescriptor, 0, len(n.Content))
	for _, c := range n.Content {
		d, err := descriptor(c)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func descriptor(n *yaml.Node) (fileDescriptor, error) {
	d := fileDescriptor{line: n.Line}
	f, err := fields(n, "a descriptor", descriptorKeys)
	if err != nil {
		return d, err
	}
	quota := false
	for _, s := range []struct {
		name string
		to   any
	}{{"key", &d.key}, {"value", &d.value}, {"shadow_mode", &d.shadow}, {"quota_mode", &quota},
		{"detailed_metric", &d.detailed}, {"value_to_metric", &d.toMetric}, {"share_threshold", &d.shared}} {
		if err := scalar(f[s.name], s.name, s.to); err != nil {
			return d, err
		}
	}
	switch {
	case d.key == "":
		return d, at(n, "descriptor has empty key")
	case quota:
		return d, at(f["quota_mode"], "quota_mode is not supported: every descriptor of a request is decided together, all or nothing")
	case d.shared && !strings.Contains(d.value, "*"):
		return d, at(n, fmt.Sprintf("share_threshold needs a wildcard value (with '*'), not %q", d.value))
	}
	if ln := f["rate_limit"]; ln != nil && ln.Tag != "!!null" {
		if d.limit, err = rateLimit(ln); err != nil {
			return d, err
		}
	}
	d.descriptors, err = descriptors(f["descriptors"])
	return d, err
}

func rateLimit(n *yaml.Node) (*fileLimit, error) {
	l := &fileLimit{line: n.Line}
	f, err := fields(n, "rate_limit", limitKeys)
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		name string
		to   any
	}{{"unit", &l.unit}, {"requests_per_unit", &l.rate}, {"unlimited", &l.unlimited}, {"name", &l.name},
		{"algorithm", &l.algorithm}, {"burst", &l.burst}, {"calendar", &l.calendar}, {"overdraft", &l.overdraft}} {
		if err := scalar(f[s.name], s.name, s.to); err != nil {
			return nil, err
		}
	}
	if r := f["replaces"]; r != nil && r.Tag != "!!null" {
		if r.Kind != yaml.SequenceNode {
			return nil, at(r, "replaces: want a list of {name: ...}")
		}
		for _, c := range r.Content {
			rf, err := fields(c, "a replaces entry", []string{"name"})
			if err != nil {
				return nil, err
			}
			var name string
			if err := scalar(rf["name"], "name", &name); err != nil {
				return nil, err
			}
			switch name {
			case "":
				return nil, at(c, "should not have an empty replaces entry")
			case l.name:
				return nil, at(c, fmt.Sprintf("replaces should not contain name of same descriptor (%q)", name))
			}
			l.replaces = append(l.replaces, name)
		}
	}
	return l, nil
}

// fields returns the values of a mapping by key, refusing keys not in
// allowed and keys given twice.
func fields(n *yaml.Node, what string, allowed []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, at(n, what+": want a mapping of "+strings.Join(allowed, ", "))
	}
	f := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, at(k, fmt.Sprintf("%s: key %q is not a string", what, k.Value))
		}
		if !slices.Contains(allowed, k.Value) {
			return nil, at(k, fmt.Sprintf("%s: unknown key %q (known: %s)", what, k.Value, strings.Join(allowed, ", ")))
		}
		if f[k.Value] != nil {
			return nil, at(k, fmt.Sprintf("%s: key %q given twice", what, k.Value))
		}
		f[k.Value] = n.Content[i+1]
	}
	return f, nil
}

// scalar decodes the value of the field name into to (a *string, *bool,
// *uint32 or *uint64); a missing or null value leaves it alone.
func scalar(n *yaml.Node, name string, to any) error {
	if n == nil || n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return at(n, name+": want a single value, not a list or a mapping")
	}
	want := ""
	switch to := to.(type) {
	case *string: // a number or a boolean is its text, as in envoyproxy/ratelimit
		*to = n.Value
		return nil
	case *bool:
		want = "true or false"
	case *uint32:
		want = "a whole number from 0 to 4294967295"
	default:
		want = "a whole number from 0"
	}
	if err := n.Decode(to); err != nil { // yaml's own message repeats the line, and names a Go type
		return at(n, fmt.Sprintf("%s: want %s, not %q", name, want, n.Value))
	}
	return nil
}

func at(n *yaml.Node, msg string) error {
	return fmt.Errorf("line %d: %s", n.Line, msg)
}
