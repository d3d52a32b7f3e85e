package gen

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"nuon.dev/nuon/tools/tfaws/schema"
)

// PackageInfo is what package.json says about the provider.
type PackageInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	CDKTF   struct {
		Provider struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"provider"`
	} `json:"cdktf"`
}

// ReadPackageInfo reads dir/package.json.
func ReadPackageInfo(dir string) (PackageInfo, error) {
	var p PackageInfo
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("package.json: %w", err)
	}
	if p.CDKTF.Provider.Name == "" || p.CDKTF.Provider.Version == "" {
		return p, fmt.Errorf("package.json: no cdktf.provider name and version: not a prebuilt cdktf provider")
	}
	return p, nil
}

// Generate reads the unpacked npm package in dir (the folder holding
// package.json and lib/) and returns the provider's schema document. When
// dir holds .jsii too, the schema is cross-checked against it (CheckJSII)
// and any difference is an error.
func Generate(dir string) (*schema.Document, error) {
	info, err := ReadPackageInfo(dir)
	if err != nil {
		return nil, err
	}
	p := &schema.Provider{ResourceSchemas: map[string]*schema.Schema{}, DataSourceSchemas: map[string]*schema.Schema{}}
	all := map[string]Result{}
	lib := filepath.Join(dir, "lib")
	entries, err := os.ReadDir(lib)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		files, err := readDir(filepath.Join(lib, e.Name()))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			continue
		}
		m, err := Parse(files)
		if err != nil {
			return nil, fmt.Errorf("lib/%s: %w", e.Name(), err)
		}
		for _, r := range m {
			all[fmt.Sprint(r.Kind)+"/"+r.Type] = r
			switch r.Kind {
			case KindProvider:
				p.Provider = r.Schema
			case KindResource:
				p.ResourceSchemas[r.Type] = r.Schema
			case KindDataSource:
				p.DataSourceSchemas[r.Type] = r.Schema
			}
		}
	}
	if p.Provider == nil {
		return nil, fmt.Errorf("%s: no provider class (lib/provider/index.js)", dir)
	}
	if len(p.ResourceSchemas) == 0 {
		return nil, fmt.Errorf("%s: no resources", dir)
	}
	if jsii := filepath.Join(dir, ".jsii"); fileExists(jsii) {
		diffs, err := CheckJSII(jsii, all)
		if err != nil {
			return nil, err
		}
		if len(diffs) > 0 {
			return nil, fmt.Errorf("schema and .jsii differ:\n%s", strings.Join(diffs, "\n"))
		}
	}
	return &schema.Document{
		FormatVersion:   schema.FormatVersion,
		ProviderSchemas: map[string]*schema.Provider{info.CDKTF.Provider.Name: p},
	}, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readDir reads a resource folder's index.js and index-structs/*.js.
func readDir(dir string) ([]string, error) {
	names := []string{filepath.Join(dir, "index.js")}
	more, _ := filepath.Glob(filepath.Join(dir, "index-structs", "*.js"))
	sort.Strings(more)
	names = append(names, more...)
	var out []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

// Kind says what a parsed class is.
type Kind int

// The kinds of top-level classes.
const (
	KindResource Kind = iota + 1
	KindDataSource
	KindProvider
)

// Result is one top-level class found by Parse.
type Result struct {
	Kind   Kind
	Type   string // Terraform type name: aws_eks_cluster, or aws for the provider
	Class  string // the cdktf class: EksCluster
	Schema *schema.Schema
}

// hclEntry is one attribute of a synthesizeHclAttributes or
// <struct>ToHclTerraform list.
type hclEntry struct {
	name, value, kind, storage string
	block                      bool
}

// flags are an attribute's computed, optional and required comment.
type flags struct{ computed, optional, required, known bool }

// getter is how a class reads an attribute: the line after its comment.
type attrInfo struct {
	name  string
	flags flags
	code  string
}

// class is a TypeScript class: its attributes in source order.
type class struct {
	name, base, tfType string
	attrs              []attrInfo
	byName             map[string]int
}

type parsed struct {
	classes map[string]*class
	funcs   map[string][]hclEntry // struct name (EksClusterVpcConfig) → entries
	synth   map[string][]hclEntry // class name → synthesizeHclAttributes entries
}

var (
	sourceMapRe = regexp.MustCompile(`(?m)^//# sourceMappingURL=data:application/json;base64,(\S+)\s*$`)
	entryRe     = regexp.MustCompile(`(\w+): \{\s*value: ([\s\S]*?),\s*isBlock: (true|false),\s*type: "(\w+)",\s*storageClassType: "(\w+)",\s*\}`)
	funcRe      = regexp.MustCompile(`(?m)^function (\w+)ToHclTerraform\(struct\) \{$`)
	jsClassRe   = regexp.MustCompile(`(?m)^class (\w+) extends cdktf\.(\w+) \{$`)
	tsClassRe   = regexp.MustCompile(`(?m)^export class (\w+) extends (?:cdktf\.)?(\w+) \{$`)
	commentRe   = regexp.MustCompile(`^\s*// (\w+) - computed: (true|false), optional: (true|false), required: (true|false)$`)
	tfTypeRe    = regexp.MustCompile(`public static readonly tfResourceType = "(\w+)";`)
	structFnRe  = regexp.MustCompile(`([A-Za-z]\w*)ToHclTerraform`)
	newClassRe  = regexp.MustCompile(`new (?:cdktf\.)?(\w+)\(this, "(\w+)"(?:, (true|false))?\)`)
)

// Parse reads the JavaScript files of one lib/<name> folder and returns
// the schemas of the top-level classes they define.
func Parse(files []string) ([]Result, error) {
	p := &parsed{classes: map[string]*class{}, funcs: map[string][]hclEntry{}, synth: map[string][]hclEntry{}}
	for _, f := range files {
		js := f
		if loc := sourceMapRe.FindStringSubmatchIndex(f); loc != nil {
			js = f[:loc[0]]
			ts, err := typeScript(f[loc[2]:loc[3]])
			if err != nil {
				return nil, err
			}
			p.readTS(ts)
		}
		p.readJS(js)
	}
	var out []Result
	names := make([]string, 0, len(p.classes))
	for n := range p.classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := p.classes[n]
		var kind Kind
		switch c.base {
		case "TerraformResource":
			kind = KindResource
		case "TerraformDataSource":
			kind = KindDataSource
		case "TerraformProvider":
			kind = KindProvider
		default:
			continue
		}
		if c.tfType == "" {
			return nil, fmt.Errorf("class %s: no tfResourceType", n)
		}
		entries, ok := p.synth[n]
		if !ok {
			return nil, fmt.Errorf("class %s: no synthesizeHclAttributes", n)
		}
		b, err := p.block(c, entries, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.tfType, err)
		}
		setsWithDynamic(b)
		if kind == KindProvider {
			// The provider's own configuration is all optional: its
			// classes carry no flags.
			for _, a := range b.Attributes {
				a.Required, a.Computed, a.Optional = false, false, true
			}
		}
		out = append(out, Result{Kind: kind, Type: c.tfType, Class: c.name, Schema: &schema.Schema{Block: b}})
	}
	return out, nil
}

// typeScript decodes the TypeScript source kept in a base64 source map.
func typeScript(b64 string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", fmt.Errorf("source map: %w", err)
	}
	var sm struct {
		SourcesContent []string `json:"sourcesContent"`
	}
	if err := json.Unmarshal(raw, &sm); err != nil {
		return "", fmt.Errorf("source map: %w", err)
	}
	if len(sm.SourcesContent) == 0 {
		return "", fmt.Errorf("source map: no sourcesContent")
	}
	return sm.SourcesContent[0], nil
}

func (p *parsed) readTS(ts string) {
	locs := tsClassRe.FindAllStringSubmatchIndex(ts, -1)
	for i, l := range locs {
		end := len(ts)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := ts[l[1]:end]
		c := &class{name: ts[l[2]:l[3]], base: ts[l[4]:l[5]], byName: map[string]int{}}
		if m := tfTypeRe.FindStringSubmatch(body); m != nil {
			c.tfType = m[1]
		}
		lines := strings.Split(body, "\n")
		for j, line := range lines {
			m := commentRe.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			code := ""
			for k := j + 1; k < len(lines) && k <= j+3; k++ {
				code += strings.TrimSpace(lines[k]) + " "
			}
			if _, dup := c.byName[m[1]]; dup {
				continue
			}
			c.byName[m[1]] = len(c.attrs)
			c.attrs = append(c.attrs, attrInfo{name: m[1], code: code,
				flags: flags{computed: m[2] == "true", optional: m[3] == "true", required: m[4] == "true", known: true}})
		}
		p.classes[c.name] = c
	}
}

func (p *parsed) readJS(js string) {
	for _, l := range funcRe.FindAllStringSubmatchIndex(js, -1) {
		name := js[l[2]:l[3]]
		body := js[l[1]:]
		if end := strings.Index(body, "\n}\n"); end >= 0 {
			body = body[:end]
		}
		p.funcs[upperFirst(name)] = entries(body)
	}
	locs := jsClassRe.FindAllStringSubmatchIndex(js, -1)
	for i, l := range locs {
		end := len(js)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := js[l[1]:end]
		k := strings.Index(body, "synthesizeHclAttributes() {")
		if k < 0 {
			continue
		}
		body = body[k:]
		if e := strings.Index(body, "\n    }\n"); e >= 0 {
			body = body[:e]
		}
		p.synth[js[l[2]:l[3]]] = entries(body)
	}
}

func entries(body string) []hclEntry {
	var out []hclEntry
	for _, m := range entryRe.FindAllStringSubmatch(body, -1) {
		out = append(out, hclEntry{name: m[1], value: m[2], block: m[3] == "true", kind: m[4], storage: m[5]})
	}
	return out
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// maxDepth bounds recursion through nested structs.
const maxDepth = 32

// block builds the block of class c (a resource class or a struct's
// OutputReference class, nil when there is none) whose configurable
// attributes are entries.
func (p *parsed) block(c *class, entries []hclEntry, depth int) (*schema.Block, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	b := &schema.Block{Attributes: map[string]*schema.Attribute{}, BlockTypes: map[string]*schema.NestedBlock{}}
	for _, e := range entries {
		f := flags{optional: true}
		if c != nil {
			if i, ok := c.byName[e.name]; ok {
				f = c.attrs[i].flags
			}
		}
		if e.block && e.kind == "map" {
			// A map of objects cannot be a block with a minimum: it is a
			// nested attribute (aws_lexv2models_bot_version's required
			// locale_specification).
			nt, err := p.nestedMap(e, depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.name, err)
			}
			b.Attributes[e.name] = &schema.Attribute{NestedType: nt, Required: f.required, Optional: !f.required, Computed: f.computed && !f.required}
			continue
		}
		if e.block {
			nb, err := p.nestedBlock(e, f, depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.name, err)
			}
			b.BlockTypes[e.name] = nb
			continue
		}
		t, err := storageType(e.storage, e.kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		b.Attributes[e.name] = &schema.Attribute{Type: t, Required: f.required, Optional: !f.required, Computed: f.computed && !f.required}
	}
	if c != nil {
		for _, a := range c.attrs {
			if _, ok := b.Attributes[a.name]; ok {
				continue
			}
			if _, ok := b.BlockTypes[a.name]; ok {
				continue
			}
			if a.flags.optional || a.flags.required {
				// Configurable, but not in the synthesized list: the
				// list is the truth for configurable attributes.
				continue
			}
			t, err := p.computedType(a.code, depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			b.Attributes[a.name] = &schema.Attribute{Type: t, Computed: true}
		}
	}
	if len(b.Attributes) == 0 {
		b.Attributes = nil
	}
	if len(b.BlockTypes) == 0 {
		b.BlockTypes = nil
	}
	return b, nil
}

// nestedMap is the nested type of a map of objects.
func (p *parsed) nestedMap(e hclEntry, depth int) (*schema.NestedType, error) {
	nb, err := p.nestedBlock(e, flags{}, depth)
	if err != nil {
		return nil, err
	}
	if len(nb.Block.BlockTypes) > 0 {
		return nil, fmt.Errorf("map of objects with nested blocks")
	}
	attrs := nb.Block.Attributes
	if attrs == nil {
		attrs = map[string]*schema.Attribute{}
	}
	return &schema.NestedType{Attributes: attrs, NestingMode: schema.NestingMap}, nil
}

func (p *parsed) nestedBlock(e hclEntry, f flags, depth int) (*schema.NestedBlock, error) {
	structName := ""
	for _, m := range structFnRe.FindAllStringSubmatch(e.value, -1) {
		switch m[1] {
		case "string", "number", "boolean", "any":
			continue
		}
		structName = upperFirst(m[1])
	}
	if structName == "" {
		return nil, fmt.Errorf("block without a struct mapper in %q", e.value)
	}
	fields, ok := p.funcs[structName]
	if !ok {
		return nil, fmt.Errorf("no %sToHclTerraform function", structName)
	}
	inner, err := p.block(p.classes[structName+"OutputReference"], fields, depth+1)
	if err != nil {
		return nil, err
	}
	if inner.Attributes == nil && inner.BlockTypes == nil {
		*inner = schema.Block{}
	}
	nb := &schema.NestedBlock{Block: inner}
	many := strings.Contains(e.value, "listMapperHcl") || strings.Contains(e.value, "hashMapperHcl")
	switch e.kind {
	case "struct":
		nb.NestingMode = schema.NestingSingle
	case "list", "set":
		nb.NestingMode = e.kind
		if !many {
			nb.MaxItems = 1
		}
		if f.required {
			nb.MinItems = 1
		}
	case "map":
		nb.NestingMode = schema.NestingMap
	default:
		return nil, fmt.Errorf("block of unknown kind %q", e.kind)
	}
	return nb, nil
}

// storageType is the cty type of a simple attribute from its storage
// class type (string, numberList, stringMapList…) and kind (simple, list,
// set, map: the outermost collection).
func storageType(storage, kind string) (json.RawMessage, error) {
	var base string
	rest := storage
	for _, b := range []string{"string", "number", "boolean", "any"} {
		if strings.HasPrefix(rest, b) {
			base, rest = b, rest[len(b):]
			break
		}
	}
	var t any
	switch base {
	case "string", "number":
		t = base
	case "boolean":
		t = "bool"
	case "any":
		t = "dynamic"
	default:
		return nil, fmt.Errorf("unknown storage type %q", storage)
	}
	var wraps []string
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "List"):
			wraps, rest = append(wraps, "list"), rest[4:]
		case strings.HasPrefix(rest, "Map"):
			wraps, rest = append(wraps, "map"), rest[3:]
		default:
			return nil, fmt.Errorf("unknown storage type %q", storage)
		}
	}
	for i, w := range wraps {
		if i == len(wraps)-1 && (kind == "list" || kind == "set" || kind == "map") {
			w = kind
		}
		t = []any{w, t}
	}
	return json.Marshal(t)
}

// computedType is the cty type of a computed-only attribute from the code
// that reads it.
func (p *parsed) computedType(code string, depth int) (json.RawMessage, error) {
	var t any
	switch {
	case strings.Contains(code, "Fn.tolist(this.getListAttribute("):
		t = []any{"set", "string"}
	case strings.Contains(code, "Fn.tolist(this.getNumberListAttribute("):
		t = []any{"set", "number"}
	case strings.Contains(code, "this.getStringAttribute("):
		t = "string"
	case strings.Contains(code, "this.getNumberAttribute("):
		t = "number"
	case strings.Contains(code, "this.getBooleanAttribute("):
		t = "bool"
	case strings.Contains(code, "this.getListAttribute("):
		t = []any{"list", "string"}
	case strings.Contains(code, "this.getNumberListAttribute("):
		t = []any{"list", "number"}
	case strings.Contains(code, "this.interpolationForAttribute("):
		t = "dynamic"
	default:
		m := newClassRe.FindStringSubmatch(code)
		if m == nil {
			return nil, fmt.Errorf("computed attribute read by unknown code %q", code)
		}
		cls := m[1]
		switch cls {
		case "StringMap":
			t = []any{"map", "string"}
		case "NumberMap":
			t = []any{"map", "number"}
		case "BooleanMap":
			t = []any{"map", "bool"}
		case "AnyMap":
			t = []any{"map", "dynamic"}
		case "StringMapList":
			t = []any{"list", []any{"map", "string"}}
		default:
			var elem, wrap string
			switch {
			case strings.HasSuffix(cls, "OutputReference"):
				elem = strings.TrimSuffix(cls, "OutputReference")
			case strings.HasSuffix(cls, "List"):
				elem, wrap = strings.TrimSuffix(cls, "List"), "list"
				if m[3] == "true" {
					wrap = "set"
				}
			case strings.HasSuffix(cls, "Map"):
				elem, wrap = strings.TrimSuffix(cls, "Map"), "map"
			default:
				return nil, fmt.Errorf("computed attribute of unknown class %s", cls)
			}
			obj, err := p.objectType(elem, depth+1)
			if err != nil {
				return nil, err
			}
			t = obj
			if wrap != "" {
				t = []any{wrap, obj}
			}
		}
	}
	return json.Marshal(t)
}

// objectType is the object type of a computed struct, from its
// OutputReference class's attributes.
func (p *parsed) objectType(structName string, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	c, ok := p.classes[structName+"OutputReference"]
	if !ok {
		return nil, fmt.Errorf("no class %sOutputReference", structName)
	}
	attrs := map[string]any{}
	for _, a := range c.attrs {
		t, err := p.computedType(a.code, depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		attrs[a.name] = json.RawMessage(t)
	}
	return []any{"object", attrs}, nil
}

// setsWithDynamic turns set blocks that hold a dynamic attribute at any
// depth into list blocks (terraform refuses dynamic types in sets) and
// reports whether b holds one.
func setsWithDynamic(b *schema.Block) bool {
	found := false
	for _, a := range b.Attributes {
		if strings.Contains(string(a.Type), `"dynamic"`) {
			found = true
		}
	}
	for _, nb := range b.BlockTypes {
		if setsWithDynamic(nb.Block) {
			found = true
			if nb.NestingMode == schema.NestingSet {
				nb.NestingMode = schema.NestingList
			}
		}
	}
	return found
}
