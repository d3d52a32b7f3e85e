package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// goTypes makes a value of the Go type of each schema's files.
var goTypes = map[string]func() any{
	SchemaApp:              func() any { return new(App) },
	SchemaChannel:          func() any { return new(Channel) },
	SchemaRelease:          func() any { return new(Release) },
	SchemaInstall:          func() any { return new(Install) },
	SchemaInstallState:     func() any { return new(InstallState) },
	SchemaComponentState:   func() any { return new(ComponentState) },
	SchemaJob:              func() any { return new(Job) },
	SchemaJobResult:        func() any { return new(JobResult) },
	SchemaStatus:           func() any { return new(Status) },
	SchemaRequest:          func() any { return new(Request) },
	SchemaInstallRequests:  func() any { return new(InstallRequests) },
	SchemaCustomerPolicy:   func() any { return new(CustomerPolicy) },
	SchemaTrustRoot:        func() any { return new(TrustRootFile) },
	SchemaApproval:         func() any { return new(Approval) },
	SchemaApprovers:        func() any { return new(Approvers) },
	SchemaInstallApprovals: func() any { return new(InstallApprovals) },
}

// ValidateJSON checks a JSON document against one of the embedded schemas
// (SchemaJob, SchemaStatus, …), and that it decodes into the schema's Go
// type: a number the schema allows may still not fit the Go field (7.0 for
// an int64). It returns nil or Problems, each with the field path of the
// offending value and its line and column. The problems name the file by
// the schema's title; a caller that knows the file's path can set File.
func ValidateJSON(schema string, data []byte) error {
	set, err := loadSchemas()
	if err != nil {
		return err
	}
	s, err := set.schema(schema)
	if err != nil {
		return err
	}
	file := schema
	if raw, ok := set.raw[schema].(map[string]any); ok {
		if title, ok := raw["title"].(string); ok && title != "" {
			file = title
		}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return Problems{jsonSyntaxProblem(file, data, err)}
	}
	if err := s.Validate(v); err != nil {
		return schemaProblems(newJSONDoc(file, data), set, v, true, err).Err()
	}
	if newValue, ok := goTypes[schema]; ok {
		if err := json.Unmarshal(data, newValue()); err != nil {
			return Problems{jsonDecodeProblem(file, data, err)}
		}
	}
	return nil
}

func jsonDecodeProblem(file string, data []byte, err error) Problem {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return Problem{File: file, Message: err.Error()}
	}
	field := te.Field
	if d := newJSONDoc(file, data); field != "" {
		if _, ok := d.pos[field]; ok {
			return d.at(field, false, "%s does not fit a Go %s", te.Value, te.Type)
		}
	}
	p := Problem{File: file, Field: field, Message: fmt.Sprintf("%s does not fit a Go %s", te.Value, te.Type)}
	p.Line, p.Column = lineColumn(data, int(te.Offset)-1)
	return p
}

func jsonSyntaxProblem(file string, data []byte, err error) Problem {
	if errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) == 0 {
		return Problem{File: file, Line: 1, Message: "file is empty"}
	}
	p := Problem{File: file, Message: "invalid JSON: " + err.Error()}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		p.Line, p.Column = lineColumn(data, int(se.Offset)-1)
	}
	return p
}

// locator places a problem about a field of a parsed file.
type locator interface {
	// at returns a problem about field at its value, or at its key when
	// key is true.
	at(field string, key bool, format string, args ...any) Problem
}

// jsonDoc locates the values of a JSON document by byte offset.
type jsonDoc struct {
	file string
	data []byte
	pos  map[string]int
	keys map[string]int
}

var _ locator = (*jsonDoc)(nil)

func newJSONDoc(file string, data []byte) *jsonDoc {
	d := &jsonDoc{file: file, data: data, pos: map[string]int{}, keys: map[string]int{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	_ = d.index(dec, "")
	return d
}

// index records the offset of the value that comes next in dec, found at
// field, and of everything inside it.
func (d *jsonDoc) index(dec *json.Decoder, field string) error {
	d.pos[field] = d.skip(dec.InputOffset())
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			off := d.skip(dec.InputOffset())
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			f := joinField(field, key)
			d.keys[f] = off
			if err := d.index(dec, f); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := d.index(dec, indexField(field, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
	}
	return err
}

// skip moves off past the white space and separators before a token.
func (d *jsonDoc) skip(off int64) int {
	i := int(off)
	for i < len(d.data) && strings.IndexByte(" \t\r\n,:", d.data[i]) >= 0 {
		i++
	}
	return i
}

func (d *jsonDoc) at(field string, key bool, format string, args ...any) Problem {
	p := Problem{File: d.file, Field: field, Message: fmt.Sprintf(format, args...)}
	off, ok := -1, false
	if key {
		off, ok = d.keys[field]
	}
	if !ok {
		off, ok = d.pos[field]
	}
	for f := field; !ok && f != ""; {
		f = parentField(f)
		off, ok = d.pos[f]
	}
	if ok {
		p.Line, p.Column = lineColumn(d.data, off)
	}
	return p
}

// lineColumn converts a byte offset into a 1-based line and column, the
// column counted in characters.
func lineColumn(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return bytes.Count(data[:off], []byte{'\n'}) + 1, utf8.RuneCount(data[start:off]) + 1
}

var printer = message.NewPrinter(language.English)

// schemaProblems turns a validation error into one problem for each leaf
// cause, each at the value it is about and phrased for a person. value is
// the validated instance; jsonTerms names types as JSON does (object,
// array) rather than as YAML does (mapping, list).
func schemaProblems(loc locator, set *schemaSet, value any, jsonTerms bool, err error) Problems {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Problems{loc.at("", false, "%v", err)}
	}
	b := problemBuilder{loc: loc, set: set, value: value, jsonTerms: jsonTerms}
	b.walk(ve)
	return b.ps
}

type problemBuilder struct {
	loc       locator
	set       *schemaSet
	value     any
	jsonTerms bool
	ps        Problems
}

func (b *problemBuilder) walk(e *jsonschema.ValidationError) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			b.walk(c)
		}
		return
	}
	field, v := b.locate(e.InstanceLocation)
	add := func(field string, key bool, format string, args ...any) {
		b.ps = append(b.ps, b.loc.at(field, key, format, args...))
	}
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		known, patterns := b.set.properties(e.SchemaURL)
		for _, name := range slices.Sorted(slices.Values(k.Properties)) {
			if len(known) == 0 && len(patterns) == 1 {
				add(joinField(field, name), true, "key %q is not %s", name, describePattern(patterns[0]))
				continue
			}
			msg := fmt.Sprintf("unknown field %q", name)
			if s := suggest(name, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else if len(known) > 0 {
				msg += "; known fields: " + strings.Join(known, ", ")
			}
			add(joinField(field, name), true, "%s", msg)
		}
	case *kind.Required:
		for _, name := range k.Missing {
			add(field, false, "missing required field %q", name)
		}
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, t := range k.Want {
			want[i] = b.typeName(t)
		}
		wants := strings.Join(want, " or ")
		switch {
		case k.Got == "null":
			add(field, false, "has no value; want %s", wants)
		case slices.Contains(k.Want, "string") && (k.Got == "number" || k.Got == "integer" || k.Got == "boolean"):
			add(field, false, "must be %s, not %s; quote it", wants, b.typeName(k.Got))
		default:
			add(field, false, "must be %s, not %s", wants, b.typeName(k.Got))
		}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		add(field, false, "must be one of %s, not %s", orList(want), display(k.Got))
	case *kind.Const:
		add(field, false, "must be %s, not %s", display(k.Want), display(k.Got))
	case *kind.Pattern:
		add(field, false, "%q is not %s", k.Got, describePattern(k.Want))
	case *kind.MinItems:
		add(field, false, "must list at least %s", count(k.Want, "item", "items"))
	case *kind.MinProperties:
		add(field, false, "must have at least %s", count(k.Want, "entry", "entries"))
	case *kind.MinLength:
		if k.Want == 1 {
			add(field, false, "must not be empty")
		} else {
			add(field, false, "must be at least %s long", count(k.Want, "character", "characters"))
		}
	case *kind.MaxLength:
		add(field, false, "must be at most %s long", count(k.Want, "character", "characters"))
	case *kind.Minimum:
		add(field, false, "must be at least %s, not %s", ratString(k.Want), ratString(k.Got))
	case *kind.UniqueItems:
		i, j := k.Duplicates[0], k.Duplicates[1]
		var item any
		if s, ok := v.([]any); ok && j < len(s) {
			item = s[j]
		}
		add(indexField(field, j), false, "%s is listed twice (first at %s)", display(item), indexField(field, i))
	default:
		add(field, false, "%s", e.ErrorKind.LocalizedString(printer))
	}
}

// locate converts a JSON Schema instance location into a field path and
// the value found there: a token is an index when the value it is taken
// from is a list.
func (b *problemBuilder) locate(loc []string) (string, any) {
	field, v := "", b.value
	for _, tok := range loc {
		switch x := v.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err == nil && i >= 0 && i < len(x) {
				field, v = indexField(field, i), x[i]
				continue
			}
			field, v = joinField(field, tok), nil
		case map[string]any:
			field, v = joinField(field, tok), x[tok]
		default:
			field, v = joinField(field, tok), nil
		}
	}
	return field, v
}

func (b *problemBuilder) typeName(t string) string {
	switch t {
	case "object":
		if b.jsonTerms {
			return "an object"
		}
		return "a mapping"
	case "array":
		if b.jsonTerms {
			return "an array"
		}
		return "a list"
	case "string":
		return "a string"
	case "boolean":
		return "true or false"
	case "integer":
		return "a whole number"
	case "number":
		return "a number"
	case "null":
		return "empty"
	}
	return t
}

// patternHelp says in words what each pattern of the schemas accepts.
var patternHelp = map[string]string{
	`^[a-z0-9][a-z0-9-]{0,62}$`: "a request id (lower-case letters, digits and -, at most 63 characters)",
	`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`: "a Kubernetes label key (an optional DNS prefix and /, then a name of letters, digits, -, _ and ., at most 63 characters, starting and ending with a letter or digit)",
	`^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`:                                                                 "a Kubernetes label value (letters, digits, -, _ and ., at most 63 characters, starting and ending with a letter or digit, or empty)",
	`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`:                                                                               "a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)",
	`^[A-Za-z_][A-Za-z0-9_]*$`:                                                                                           "an identifier (letters, digits and _, not starting with a digit)",
	`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`:                                                                                "a version (letters, digits, ., _, + and -, at most 128 characters)",
	`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`:                                                                          "a duration such as 90s, 10m or 1h30m",
	`^[a-z0-9.:-]+(/[a-z0-9._-]+)+$`:                                                                                     "an OCI repository such as registry.example.com/app/api (lower case)",
	`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$`:                                                          "an IAM role ARN such as arn:aws:iam::111111111111:role/nuon-acme-maintenance",
	`^\$\{install\.sandbox\.outputs\.registry\.url\}/\$\{install\.sandbox\.outputs\.registry\.repository_prefix\}(/[a-z0-9._-]+)+@sha256:[a-f0-9]{64}$`: "the sandbox's registry output as references, a repository path and a digest",
	`^[A-Za-z0-9+=,.@:/-]+$`:                                "an STS ExternalId (letters, digits and +=,.@:/-)",
	`^[A-Za-z0-9.:-]+(/[a-z0-9._-]+)*$`:                     "a registry host with an optional path, such as 123456789012.dkr.ecr.us-east-1.amazonaws.com/nuon",
	`^ssh-ed25519 [A-Za-z0-9+/]+=*( .*)?$`:                  "an OpenSSH ed25519 public key (ssh-ed25519 AAAA… comment)",
	`^sha256:[a-f0-9]{64}$`:                                 "a digest (sha256: and 64 lower-case hex digits)",
	`^[a-z0-9-]+$`:                                          "a region such as us-east-1",
	`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`:                    "an S3 bucket name (a-z, 0-9, . and -, 3 to 63 characters)",
	`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`:                  "an S3 key such as sandbox/terraform.tfstate (letters, digits, _, . and -, in /-separated parts)",
	`^[0-9]{12}$`:                                           "a 12-digit AWS account id",
	`^([01][0-9]|2[0-3]):[0-5][0-9]$`:                       "a time of day such as 02:00 or 22:30 (HH:MM, 24-hour clock)",
	`^([0-9a-f]{40}|[0-9a-f]{64})$`:                         "a git commit id (40 or 64 lower-case hex digits)",
	`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`:                    "a job id (letters, digits, ., _ and -, at most 128 characters)",
	`^[a-z0-9.:-]+(/[a-z0-9._-]+)+@sha256:[a-f0-9]{64}$`:    "a repository pinned by digest (registry.example.com/app/api@sha256:…)",
	`^[A-Za-z0-9.:-]+(/[a-z0-9._-]+)+@sha256:[a-f0-9]{64}$`: "an install-registry repository pinned by digest (registry/path@sha256:…)",
}

func describePattern(p string) string {
	if h, ok := patternHelp[p]; ok {
		return h
	}
	return "matched by the pattern " + p
}

// suggest returns the name in known closest to name, if it is close enough
// to be a likely typo.
func suggest(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestDist && d < len(k)/2 {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// orList writes a, b or c.
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

func count(n int, one, many string) string {
	if n == 1 {
		return "one " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "nothing"
	}
	return r.RatString()
}

// display writes a value as it would appear in a file: strings quoted.
func display(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case nil:
		return "empty"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}
