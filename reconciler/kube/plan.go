package kube

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"nuon.dev/nuon/schemas"
)

// Change is one object's entry in a plan of Kubernetes objects (the
// manifests and helm plugins' plans).
type Change struct {
	// ID is Kind[.group]/namespace/name.
	ID string
	// Kind is schemas.Change*: what happens to the object.
	Kind string
	// Obj is the object as it will be (as it is, for a delete).
	Obj    map[string]any
	Fields []string       // the changed paths of an update
	Before map[string]any // the live object, for an update
	After  map[string]any // the object after the update
	Why    string         // a replace's cause
	// Drifted marks an update that sets back fields changed in the
	// cluster; Before is then unknown.
	Drifted bool
}

// Summarize lists the changes per kind, cut at schemas.MaxPlanAddresses
// in all; the counts stay exact.
func Summarize(changes []Change) schemas.PlanSummary {
	s := schemas.PlanSummary{Counts: map[string]int{}}
	listed := 0
	for _, c := range changes {
		var list *[]string
		switch c.Kind {
		case schemas.ChangeCreate:
			list = &s.Create
		case schemas.ChangeUpdate:
			list = &s.Update
		case schemas.ChangeDelete:
			list = &s.Delete
		case schemas.ChangeReplace:
			list = &s.Replace
		default:
			continue
		}
		s.Counts[c.Kind]++
		if listed >= schemas.MaxPlanAddresses {
			s.Truncated++
			continue
		}
		listed++
		*list = append(*list, c.ID)
	}
	if len(s.Counts) == 0 {
		s.Counts = nil
	}
	return s
}

// PolicyInput is the plan (format names its plugin: nuon-manifests,
// nuon-helm) as the policies read it (input.plan), in the
// shape of a Terraform plan's JSON where it can be: resource_changes, each
// with an address (Kind/namespace/name), a type (kubernetes_ and the kind
// in snake case, as the Terraform kubernetes provider names it:
// kubernetes_persistent_volume_claim), mode managed and change.actions
// (create, update, delete, or delete and create for a replace), plus the
// object's apiVersion, kind, namespace and name. No values: the policies
// judge what changes, and Secrets' data stays out.
func PolicyInput(format string, changes []Change) map[string]any {
	rcs := []any{}
	for _, c := range changes {
		u := unstructured.Unstructured{Object: c.Obj}
		var actions []any
		switch c.Kind {
		case schemas.ChangeNoop:
			actions = []any{"no-op"}
		case schemas.ChangeReplace:
			actions = []any{"delete", "create"}
		default:
			actions = []any{c.Kind}
		}
		fields := make([]any, len(c.Fields))
		for i, f := range c.Fields {
			fields[i] = f
		}
		rcs = append(rcs, map[string]any{
			"address":    c.ID,
			"type":       "kubernetes_" + Snake(u.GetKind()),
			"name":       u.GetName(),
			"namespace":  u.GetNamespace(),
			"kind":       u.GetKind(),
			"apiVersion": u.GetAPIVersion(),
			"mode":       "managed",
			"change":     map[string]any{"actions": actions, "fields": fields},
		})
	}
	return map[string]any{"format": format, "resource_changes": rcs}
}

// Snake is PersistentVolumeClaim → persistent_volume_claim.
func Snake(kind string) string {
	var b strings.Builder
	rs := []rune(kind)
	for i, c := range rs {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// secretValue is what the diff shows for any value of a Secret.
const secretValue = "(secret value)"

// ReadableDiff is the plan as a person reads it: per object, its action;
// a create's object as YAML; an update's changed fields, before → after.
// A Secret's data and stringData never appear, nor its changed values.
func ReadableDiff(changes []Change) string {
	var b strings.Builder
	marks := map[string]string{schemas.ChangeCreate: "+", schemas.ChangeUpdate: "~", schemas.ChangeDelete: "-", schemas.ChangeReplace: "-/+"}
	for _, c := range changes {
		mark, ok := marks[c.Kind]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "%s %s %s\n", mark, c.Kind, c.ID)
		secret := isSecret(c.Obj)
		switch c.Kind {
		case schemas.ChangeCreate, schemas.ChangeReplace:
			if c.Why != "" {
				fmt.Fprintf(&b, "    # %s\n", c.Why)
			}
			y, err := yaml.Marshal(masked(c.Obj))
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(strings.TrimRight(string(y), "\n"), "\n") {
				fmt.Fprintf(&b, "    %s\n", line)
			}
		case schemas.ChangeUpdate:
			for _, f := range c.Fields {
				if secret && (f == "data" || f == "stringData" || strings.HasPrefix(f, "data.") || strings.HasPrefix(f, "stringData.")) {
					fmt.Fprintf(&b, "    %s: %s\n", f, secretValue)
					continue
				}
				if c.Drifted {
					// Drift set back: the cluster's value is not known here.
					fmt.Fprintf(&b, "    %s: (drifted in the cluster) → %s\n", f, valueAt(c.After, f))
					continue
				}
				fmt.Fprintf(&b, "    %s: %s → %s\n", f, valueAt(c.Before, f), valueAt(c.After, f))
			}
		}
	}
	return b.String()
}

func isSecret(obj map[string]any) bool {
	u := unstructured.Unstructured{Object: obj}
	return u.GetKind() == "Secret" && u.GroupVersionKind().Group == ""
}

// masked is obj with a Secret's data and stringData values replaced.
func masked(obj map[string]any) map[string]any {
	if !isSecret(obj) {
		return obj
	}
	out := (&unstructured.Unstructured{Object: obj}).DeepCopy().Object
	for _, field := range []string{"data", "stringData"} {
		m, ok := out[field].(map[string]any)
		if !ok {
			if _, present := out[field]; present {
				out[field] = secretValue
			}
			continue
		}
		for k := range m {
			m[k] = secretValue
		}
	}
	return out
}

// maxValue bounds one value shown in an update's diff.
const maxValue = 200

// valueAt is the value at a diffPaths path in obj, as compact JSON.
func valueAt(obj map[string]any, path string) string {
	var v any = obj
	for part := range strings.SplitSeq(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			fmt.Sscanf(part[i:], "[%d]", &index)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "(none)"
		}
		if v, ok = m[name]; !ok {
			return "(none)"
		}
		if index >= 0 {
			list, ok := v.([]any)
			if !ok || index >= len(list) {
				return "(none)"
			}
			v = list[index]
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	if len(b) > maxValue {
		return strings.ToValidUTF8(string(b[:maxValue]), "") + "…"
	}
	return string(b)
}
