package schemas

import (
	"fmt"
	"regexp"
	"strings"
)

// Reference kinds an input string can hold.
const (
	RefInstallID    = "install.id"
	RefInstallInput = "install.inputs"
	RefOutput       = "components.outputs"
	RefSecret       = "secrets"
	// RefSandbox is ${install.sandbox.outputs.OUTPUT} (a whole object of
	// the sandbox outputs contract) or ${install.sandbox.outputs.OUTPUT.KEY}
	// (one key of it), resolved inside the install from the outputs the
	// agent recorded when it applied the sandbox.
	RefSandbox = "install.sandbox.outputs"
)

// Ref is one ${…} reference inside an input string.
type Ref struct {
	// Start and End delimit the whole ${…} in the string.
	Start, End int
	Kind       string
	// Name is the install input, secret or component name, or the
	// sandbox output of a RefSandbox.
	Name string
	// Output is the output name of a component reference, or the key of
	// a RefSandbox ("" for the whole object).
	Output string
}

// String is the reference as written, without ${ }.
func (r Ref) String() string {
	switch r.Kind {
	case RefInstallID:
		return "install.id"
	case RefInstallInput:
		return "install.inputs." + r.Name
	case RefOutput:
		return "components." + r.Name + ".outputs." + r.Output
	case RefSandbox:
		if r.Output == "" {
			return RefSandbox + "." + r.Name
		}
		return RefSandbox + "." + r.Name + "." + r.Output
	default:
		return "secrets." + r.Name
	}
}

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ParseRefs finds every ${…} reference in s. "$${" is a literal "${".
// An unterminated or unknown reference is an error.
func ParseRefs(s string) ([]Ref, error) {
	var refs []Ref
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			break
		}
		j += i
		if j > 0 && s[j-1] == '$' {
			i = j + 2
			continue
		}
		k := strings.IndexByte(s[j:], '}')
		if k < 0 {
			ref := s[j:]
			if r := []rune(ref); len(r) > 40 {
				ref = string(r[:40]) + "…"
			}
			return nil, fmt.Errorf("unterminated reference %q: no closing }", ref)
		}
		k += j
		r, err := parseRef(strings.TrimSpace(s[j+2 : k]))
		if err != nil {
			return nil, err
		}
		r.Start, r.End = j, k+1
		refs = append(refs, r)
		i = k + 1
	}
	return refs, nil
}

func parseRef(expr string) (Ref, error) {
	parts := strings.Split(expr, ".")
	switch {
	case expr == "install.id":
		return Ref{Kind: RefInstallID}, nil
	case len(parts) == 3 && parts[0] == "install" && parts[1] == "inputs" && identRE.MatchString(parts[2]):
		return Ref{Kind: RefInstallInput, Name: parts[2]}, nil
	case len(parts) == 4 && parts[0] == "components" && parts[2] == "outputs" && labelRE.MatchString(parts[1]) && identRE.MatchString(parts[3]):
		return Ref{Kind: RefOutput, Name: parts[1], Output: parts[3]}, nil
	case len(parts) == 2 && parts[0] == "secrets" && identRE.MatchString(parts[1]):
		return Ref{Kind: RefSecret, Name: parts[1]}, nil
	case (len(parts) == 4 || len(parts) == 5) && parts[0] == "install" && parts[1] == "sandbox" && parts[2] == "outputs" && identRE.MatchString(parts[3]):
		r := Ref{Kind: RefSandbox, Name: parts[3]}
		if len(parts) == 5 {
			if !identRE.MatchString(parts[4]) {
				break
			}
			r.Output = parts[4]
		}
		return r, nil
	}
	return Ref{}, fmt.Errorf("unknown reference ${%s}: want ${install.id}, ${install.inputs.NAME}, ${install.sandbox.outputs.OUTPUT.KEY}, ${components.NAME.outputs.OUTPUT} or ${secrets.NAME}", expr)
}

// Substitute replaces the references in s for which resolve returns ok,
// and keeps the others as written. A string that is exactly one reference
// takes the resolved value's own type (a number stays a number).
func Substitute(s string, resolve func(Ref) (any, bool)) (any, error) {
	refs, err := ParseRefs(s)
	if err != nil {
		return nil, err
	}
	if len(refs) == 1 && refs[0].Start == 0 && refs[0].End == len(s) {
		if v, ok := resolve(refs[0]); ok {
			return v, nil
		}
		return s, nil
	}
	var b strings.Builder
	last := 0
	for _, r := range refs {
		b.WriteString(s[last:r.Start])
		if v, ok := resolve(r); ok {
			if str, isStr := v.(string); isStr {
				b.WriteString(str)
			} else {
				fmt.Fprint(&b, v)
			}
		} else {
			b.WriteString(s[r.Start:r.End])
		}
		last = r.End
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// WalkStrings calls fn for every string inside v (maps, slices, scalars),
// with its field path relative to v, and replaces it by fn's result.
func WalkStrings(v any, path string, fn func(path, s string) (any, error)) (any, error) {
	switch x := v.(type) {
	case string:
		return fn(path, x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			r, err := WalkStrings(e, p, fn)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := WalkStrings(e, fmt.Sprintf("%s[%d]", path, i), fn)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}
