package schemas

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// Files holds the JSON Schema of every file kind, by file name
// (app.schema.json, …). Editors can use them directly from schemas/.
//
//go:embed *.schema.json
var Files embed.FS

// Schema names, one per file kind.
const (
	SchemaApp             = "app.schema.json"
	SchemaChannel         = "channel.schema.json"
	SchemaRelease         = "release.schema.json"
	SchemaInstall         = "install.schema.json"
	SchemaInstallState    = "install-state.schema.json"
	SchemaComponentState  = "component-state.schema.json"
	SchemaJob             = "job.schema.json"
	SchemaJobResult       = "job-result.schema.json"
	SchemaStatus          = "status.schema.json"
	SchemaRequest         = "request.schema.json"
	SchemaInstallRequests = "install-requests.schema.json"
	SchemaCustomerPolicy  = "customer-policy.schema.json"
	SchemaTrustRoot       = "trust-root.schema.json"
	SchemaApproval        = "approval.schema.json"
	SchemaApprovers       = "approvers.schema.json"
	// SchemaInstallApprovals is installs/<id>/approvals.json.
	SchemaInstallApprovals = "install-approvals.schema.json"
)

const schemaBase = "https://nuon.dev/schemas/"

// schemaSet is every embedded schema, as parsed JSON (to look up the
// properties an object allows) and compiled.
type schemaSet struct {
	raw      map[string]any
	compiled map[string]*jsonschema.Schema
}

var loadSchemas = sync.OnceValues(func() (*schemaSet, error) {
	set := &schemaSet{raw: map[string]any{}, compiled: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	entries, err := Files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := Files.ReadFile(e.Name())
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		set.raw[e.Name()] = doc
		if err := c.AddResource(schemaBase+e.Name(), doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
	}
	for _, e := range entries {
		s, err := c.Compile(schemaBase + e.Name())
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		set.compiled[e.Name()] = s
	}
	return set, nil
})

// schema returns the compiled schema of that name.
func (set *schemaSet) schema(name string) (*jsonschema.Schema, error) {
	s, ok := set.compiled[name]
	if !ok {
		return nil, fmt.Errorf("no schema %q", name)
	}
	return s, nil
}

// properties returns the sorted property names and the patterns of the
// pattern properties of the schema object at url (a schema location such
// as https://nuon.dev/schemas/app.schema.json#/$defs/component).
func (set *schemaSet) properties(url string) (names, patterns []string) {
	rest, ok := strings.CutPrefix(url, schemaBase)
	if !ok {
		return nil, nil
	}
	file, ptr, _ := strings.Cut(rest, "#")
	v := set.raw[file]
	for _, tok := range strings.Split(ptr, "/") {
		if tok == "" {
			continue
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		v = m[tok]
	}
	m, _ := v.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	pats, _ := m["patternProperties"].(map[string]any)
	return slices.Sorted(maps.Keys(props)), slices.Sorted(maps.Keys(pats))
}

// aliasFactor bounds how far aliases may multiply a file: a file of n bytes
// may expand to at most aliasFactor*n+aliasSlack values.
const (
	aliasFactor = 10
	aliasSlack  = 1000
)

// maxDepth bounds how deeply values may nest; source files need a few
// levels, and the bound keeps field paths short.
const maxDepth = 64

// document is one parsed YAML file that remembers where each value sits.
type document struct {
	file string
	root *yaml.Node
	// value is the file as the plain JSON-like values the schema validator
	// takes.
	value any
	// pos maps a field path (components[2].dependsOn[0], see joinField and
	// indexField) to the node holding its value; keys maps the path of a
	// mapping entry to its key node.
	pos  map[string]*yaml.Node
	keys map[string]*yaml.Node

	budget  int                 // values left to convert
	tooDeep bool                // reported that values nest too deeply
	active  map[*yaml.Node]bool // mappings and lists being converted
}

var _ locator = (*document)(nil)

// parseYAML reads one YAML document and converts it for validation. A
// syntax error is reported on its own, without looking further.
func parseYAML(file string, data []byte) (*document, Problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Problems{{File: file, Line: 1, Message: "file is empty"}}
		}
		return nil, syntaxProblems(file, data, err)
	}
	body := &root
	if body.Kind == yaml.DocumentNode && len(body.Content) == 1 {
		body = body.Content[0]
	}
	if isEmpty(body) {
		return nil, Problems{{File: file, Line: 1, Message: "file is empty"}}
	}
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxProblems(file, data, err)
		}
		if !isEmpty(&extra) {
			return nil, Problems{{File: file, Line: extra.Line, Column: extra.Column,
				Message: "a second YAML document starts here; a file holds exactly one"}}
		}
	}
	d := &document{
		file:   file,
		root:   body,
		pos:    map[string]*yaml.Node{},
		keys:   map[string]*yaml.Node{},
		budget: aliasFactor*len(data) + aliasSlack,
		active: map[*yaml.Node]bool{},
	}
	var ps Problems
	d.value = d.convert(body, "", 0, &ps)
	if d.budget < 0 {
		return nil, Problems{{File: file, Line: 1, Message: fmt.Sprintf(
			"aliases expand the file to more than %d values", aliasFactor*len(data)+aliasSlack)}}
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return d, nil
}

// isEmpty reports whether n is a document or value with nothing in it.
func isEmpty(n *yaml.Node) bool {
	switch n.Kind {
	case 0:
		return true
	case yaml.DocumentNode:
		return len(n.Content) == 0 || len(n.Content) == 1 && isEmpty(n.Content[0])
	case yaml.ScalarNode:
		return n.ShortTag() == "!!null" && n.Value == ""
	}
	return false
}

// convert turns the YAML tree under n, found at field, into plain values
// and records where each one sits.
func (d *document) convert(n *yaml.Node, field string, depth int, ps *Problems) any {
	if d.budget--; d.budget < 0 || d.tooDeep {
		return nil
	}
	if depth > maxDepth {
		*ps = append(*ps, d.problemAt(n, field, fmt.Sprintf("values nest more than %d levels deep", maxDepth)))
		d.tooDeep = true
		return nil
	}
	d.pos[field] = n
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil
		}
		if d.active[n.Alias] {
			*ps = append(*ps, d.problemAt(n, field, fmt.Sprintf("alias *%s refers to a value that contains it", n.Value)))
			return nil
		}
		n = n.Alias
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		d.active[n] = true
		defer delete(d.active, n)
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch {
			case k.Kind != yaml.ScalarNode:
				*ps = append(*ps, d.problemAt(k, field, "a key must be a plain string"))
				continue
			case k.ShortTag() == "!!merge":
				*ps = append(*ps, d.problemAt(k, field, "merge keys (<<) are not supported; write the fields out"))
				continue
			}
			f := joinField(field, k.Value)
			if first, dup := seen[k.Value]; dup {
				*ps = append(*ps, d.problemAt(k, f, fmt.Sprintf("key %q appears twice (first at line %d)", k.Value, first.Line)))
				continue
			}
			seen[k.Value] = k
			d.keys[f] = k
			m[k.Value] = d.convert(v, f, depth+1, ps)
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			s[i] = d.convert(c, indexField(field, i), depth+1, ps)
		}
		return s
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			for _, p := range yamlProblems(d.file, err) {
				*ps = append(*ps, d.problemAt(n, field, p.Message))
			}
			return nil
		}
		switch x := v.(type) {
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				*ps = append(*ps, d.problemAt(n, field, fmt.Sprintf("%s is not a finite number, which JSON cannot hold; quote it for the text", n.Value)))
				return nil
			}
			return x
		case int, int64, uint64, string, bool, nil:
			return x
		default:
			// Timestamps and binary values read as the text written.
			return n.Value
		}
	}
	return nil
}

func (d *document) problemAt(n *yaml.Node, field, msg string) Problem {
	return Problem{File: d.file, Line: n.Line, Column: n.Column, Field: field, Message: msg}
}

// validate checks the document against the named schema and decodes it
// into out when it is valid.
func (d *document) validate(schema string, out any) Problems {
	set, err := loadSchemas()
	if err != nil {
		return Problems{{File: d.file, Message: err.Error()}}
	}
	s, err := set.schema(schema)
	if err != nil {
		return Problems{{File: d.file, Message: err.Error()}}
	}
	if err := s.Validate(d.value); err != nil {
		return schemaProblems(d, set, d.value, false, err)
	}
	if err := d.root.Decode(out); err != nil {
		return yamlProblems(d.file, err)
	}
	return nil
}

// joinField is the path of the entry key in the mapping at parent.
func joinField(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// indexField is the path of item i in the list at parent.
func indexField(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

// at returns a problem located at field (the value's line), or at the key
// when key is true, falling back to the nearest enclosing value.
func (d *document) at(field string, key bool, format string, args ...any) Problem {
	p := Problem{File: d.file, Field: field, Message: fmt.Sprintf(format, args...)}
	var n *yaml.Node
	if key {
		n = d.keys[field]
	}
	if n == nil {
		n = d.pos[field]
	}
	for f := field; n == nil && f != ""; {
		f = parentField(f)
		n = d.pos[f]
	}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	return p
}

func parentField(f string) string {
	i := strings.LastIndexAny(f, ".[")
	if i < 0 {
		return ""
	}
	return f[:i]
}

// yamlProblems turns an error of the YAML parser or decoder into problems,
// taking the line out of its "line N: message" text.
func yamlProblems(file string, err error) Problems {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		ps := make(Problems, 0, len(te.Errors))
		for _, e := range te.Errors {
			ps = append(ps, lineProblem(file, e, ""))
		}
		return ps
	}
	return Problems{lineProblem(file, strings.TrimPrefix(err.Error(), "yaml: "), syntaxPrefix)}
}

// syntaxProblems is yamlProblems for an error of the parser, with the
// line corrected: yaml.v3 counts the lines of parser errors from 0, leaves
// out line 1, places a tab error at the start of the scalar before it and
// gives no line for an unknown anchor.
func syntaxProblems(file string, data []byte, err error) Problems {
	ps := yamlProblems(file, err)
	if len(ps) != 1 || !strings.HasPrefix(ps[0].Message, syntaxPrefix) {
		return ps
	}
	p := &ps[0]
	msg := strings.TrimPrefix(p.Message, syntaxPrefix)
	lines := strings.Split(string(data), "\n")
	switch {
	case strings.HasPrefix(msg, "did not find expected") || strings.HasPrefix(msg, "found duplicate") ||
		strings.HasPrefix(msg, "found incompatible") || strings.HasPrefix(msg, "found undefined"):
		p.Line++
	case strings.HasPrefix(msg, "unknown anchor '"):
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		for i, l := range lines {
			if j := strings.Index(l, "*"+name); j >= 0 {
				p.Line, p.Column = i+1, utf8.RuneCountInString(l[:j])+1
				break
			}
		}
	case strings.Contains(msg, "tab character"):
		for i := max(p.Line, 1) - 1; i < len(lines); i++ {
			indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " \t"))]
			if strings.Contains(indent, "\t") {
				p.Line = i + 1
				break
			}
		}
	}
	if p.Line == 0 {
		p.Line = 1
	}
	return ps
}

const syntaxPrefix = "invalid YAML: "

func lineProblem(file, msg, prefix string) Problem {
	p := Problem{File: file, Message: prefix + msg}
	rest, ok := strings.CutPrefix(msg, "line ")
	if !ok {
		return p
	}
	i := strings.Index(rest, ": ")
	if i <= 0 {
		return p
	}
	if n, err := strconv.Atoi(rest[:i]); err == nil && n > 0 {
		p.Line = n
		p.Message = prefix + rest[i+2:]
	}
	return p
}
