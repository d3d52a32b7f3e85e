package schemas

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"gopkg.in/yaml.v3"
)

// Files holds the JSON Schema of every file kind, by file name
// (app.schema.json, …). Editors can use them directly from schemas/.
//
//go:embed *.schema.json
var Files embed.FS

// Schema names, one per file kind.
const (
	SchemaApp            = "app.schema.json"
	SchemaChannel        = "channel.schema.json"
	SchemaRelease        = "release.schema.json"
	SchemaInstall        = "install.schema.json"
	SchemaInstallState   = "install-state.schema.json"
	SchemaComponentState = "component-state.schema.json"
	SchemaJob            = "job.schema.json"
	SchemaJobResult      = "job-result.schema.json"
	SchemaStatus         = "status.schema.json"
)

const schemaBase = "https://nuon.dev/schemas/"

var compiled = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	entries, err := Files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, _ := Files.ReadFile(e.Name())
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		if err := c.AddResource(schemaBase+e.Name(), doc); err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, e := range entries {
		s, err := c.Compile(schemaBase + e.Name())
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", e.Name(), err)
		}
		out[e.Name()] = s
	}
	return out, nil
})

var printer = message.NewPrinter(language.English)

// document is one parsed YAML file that remembers where each value sits.
type document struct {
	file string
	root *yaml.Node
	// pos maps a field path (see fieldPath) to the node holding its value
	// and, for mapping entries, to the key node.
	pos  map[string]*yaml.Node
	keys map[string]*yaml.Node
}

// parseYAML reads one YAML document. A syntax error is a single problem.
func parseYAML(file string, data []byte) (*document, Problems) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Problems{{File: file, Line: 1, Message: "file is empty"}}
		}
		return nil, Problems{yamlProblem(file, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Problems{{File: file, Line: extra.Line, Message: "more than one YAML document; a file holds exactly one"}}
	}
	d := &document{file: file, root: &root, pos: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	body := &root
	if body.Kind == yaml.DocumentNode && len(body.Content) == 1 {
		body = body.Content[0]
	}
	d.root = body
	d.index(body, nil)
	return d, nil
}

func (d *document) index(n *yaml.Node, path []string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	d.pos[fieldPath(path)] = n
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := append(append([]string(nil), path...), n.Content[i].Value)
			d.keys[fieldPath(p)] = n.Content[i]
			d.index(n.Content[i+1], p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.index(c, append(append([]string(nil), path...), strconv.Itoa(i)))
		}
	}
}

// fieldPath renders a location as components[2].dependsOn[0].
func fieldPath(path []string) string {
	var b strings.Builder
	for _, p := range path {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
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

// value converts the YAML tree into the plain JSON-like value the schema
// validator takes.
func (d *document) value() (any, Problems) {
	var ps Problems
	var conv func(n *yaml.Node, path []string) any
	conv = func(n *yaml.Node, path []string) any {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := append(append([]string(nil), path...), k.Value)
				if k.Kind != yaml.ScalarNode {
					ps = append(ps, Problem{File: d.file, Line: k.Line, Column: k.Column, Field: fieldPath(path), Message: "a key must be a plain string"})
					continue
				}
				if _, dup := m[k.Value]; dup {
					ps = append(ps, Problem{File: d.file, Line: k.Line, Column: k.Column, Field: fieldPath(p), Message: "duplicate key"})
				}
				m[k.Value] = conv(n.Content[i+1], p)
			}
			return m
		case yaml.SequenceNode:
			s := make([]any, len(n.Content))
			for i, c := range n.Content {
				s[i] = conv(c, append(append([]string(nil), path...), strconv.Itoa(i)))
			}
			return s
		case yaml.ScalarNode:
			var v any
			if err := n.Decode(&v); err != nil {
				ps = append(ps, Problem{File: d.file, Line: n.Line, Column: n.Column, Field: fieldPath(path), Message: err.Error()})
				return nil
			}
			switch x := v.(type) {
			case int, int64, uint64, float64, string, bool, nil:
				return x
			default:
				// Timestamps and binary values read as strings.
				return n.Value
			}
		}
		return nil
	}
	v := conv(d.root, nil)
	return v, ps
}

// validate checks the document against the named schema and decodes it
// into out when it is valid.
func (d *document) validate(schema string, out any) Problems {
	v, ps := d.value()
	if len(ps) > 0 {
		return ps
	}
	all, err := compiled()
	if err != nil {
		return Problems{{File: d.file, Message: err.Error()}}
	}
	if err := all[schema].Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return Problems{{File: d.file, Message: err.Error()}}
		}
		return d.schemaProblems(ve)
	}
	if err := d.root.Decode(out); err != nil {
		return Problems{yamlProblem(d.file, err)}
	}
	return nil
}

// schemaProblems flattens a validation error into one problem for each
// leaf cause, each at the line of the value it is about.
func (d *document) schemaProblems(ve *jsonschema.ValidationError) Problems {
	var ps Problems
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		field := fieldPath(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				f := fieldPath(append(append([]string(nil), e.InstanceLocation...), name))
				ps = append(ps, d.at(f, true, "unknown field %q", name))
			}
		case *kind.Required:
			for _, name := range k.Missing {
				ps = append(ps, d.at(field, false, "missing required field %q", name))
			}
		default:
			ps = append(ps, d.at(field, false, "%s", e.ErrorKind.LocalizedString(printer)))
		}
	}
	walk(ve)
	return ps
}

func yamlProblem(file string, err error) Problem {
	// yaml.v3 reports "yaml: line N: message".
	msg := err.Error()
	p := Problem{File: file, Message: msg}
	rest, ok := strings.CutPrefix(msg, "yaml: line ")
	if !ok {
		if te := (*yaml.TypeError)(nil); errors.As(err, &te) && len(te.Errors) > 0 {
			rest, ok = strings.CutPrefix(te.Errors[0], "line ")
		}
	}
	if ok {
		if i := strings.Index(rest, ":"); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				p.Line = n
				p.Message = strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return p
}
