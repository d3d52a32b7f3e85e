package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// The CloudFormation resource specification (npm @aws-cdk/cfnspec,
// `make cfnspec`): the subset of its format the check reads.
type cfnSpec struct {
	ResourceSpecificationVersion string
	ResourceTypes                map[string]cfnType
	PropertyTypes                map[string]cfnType
}

type cfnType struct {
	Properties map[string]cfnProp
}

type cfnProp struct {
	Required          bool
	PrimitiveType     string
	Type              string
	ItemType          string
	PrimitiveItemType string
}

func loadSpec(t *testing.T) *cfnSpec {
	t.Helper()
	path := os.Getenv("NUON_CFNSPEC")
	b, err := os.ReadFile(path)
	if path == "" || err != nil {
		msg := fmt.Sprintf("the CloudFormation resource specification is missing (NUON_CFNSPEC=%q): run `make cfnspec`", path)
		if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
			t.Fatalf("%s (CI=%s)", msg, ci)
		}
		t.Skip(msg)
	}
	var s cfnSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.ResourceTypes) < 1000 {
		t.Fatalf("%s: %d resource types: not the full specification", path, len(s.ResourceTypes))
	}
	return &s
}

// intrinsic reports whether v is a CloudFormation intrinsic function or a
// Ref, whose type the specification cannot check.
func intrinsic(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

// checkResource returns every way props break the specification of
// resource type typ.
func (s *cfnSpec) checkResource(typ string, props map[string]any) []string {
	rt, ok := s.ResourceTypes[typ]
	if !ok {
		return []string{fmt.Sprintf("unknown resource type %s", typ)}
	}
	return s.checkProps(typ, typ, rt, props)
}

func (s *cfnSpec) checkProps(where, resource string, t cfnType, props map[string]any) []string {
	var errs []string
	names := make([]string, 0, len(t.Properties))
	for n := range t.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, ok := props[n]; !ok && t.Properties[n].Required {
			errs = append(errs, fmt.Sprintf("%s: required property %s missing", where, n))
		}
	}
	for n, v := range props {
		p, ok := t.Properties[n]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: unknown property %s", where, n))
			continue
		}
		errs = append(errs, s.checkValue(where+"."+n, resource, p.PrimitiveType, p.Type, p.ItemType, p.PrimitiveItemType, v)...)
	}
	return errs
}

func (s *cfnSpec) checkValue(where, resource, prim, typ, item, primItem string, v any) []string {
	if intrinsic(v) {
		return nil
	}
	if prim != "" {
		if !primitiveOK(prim, v) {
			return []string{fmt.Sprintf("%s: %v (%T) is not a %s", where, v, v, prim)}
		}
		return nil
	}
	switch typ {
	case "List":
		l, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: not a list", where)}
		}
		var errs []string
		for i, e := range l {
			errs = append(errs, s.checkValue(fmt.Sprintf("%s[%d]", where, i), resource, primItem, item, "", "", e)...)
		}
		return errs
	case "Map":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: not a map", where)}
		}
		var errs []string
		for k, e := range m {
			errs = append(errs, s.checkValue(where+"."+k, resource, primItem, item, "", "", e)...)
		}
		return errs
	case "":
		return []string{fmt.Sprintf("%s: the specification gives no type", where)}
	default:
		pt, ok := s.PropertyTypes[resource+"."+typ]
		if !ok {
			pt, ok = s.PropertyTypes[typ] // shared types such as Tag
		}
		if !ok {
			return []string{fmt.Sprintf("%s: unknown property type %s", where, typ)}
		}
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: not a %s object", where, typ)}
		}
		return s.checkProps(where, resource, pt, m)
	}
}

func primitiveOK(prim string, v any) bool {
	switch prim {
	case "String":
		_, ok := v.(string)
		return ok
	case "Integer", "Long", "Double":
		_, ok := v.(float64)
		return ok
	case "Boolean":
		_, ok := v.(bool)
		return ok
	case "Json":
		_, ok := v.(map[string]any)
		return ok
	case "Timestamp":
		_, ok := v.(string)
		return ok
	}
	return false
}

// TestCloudFormationSpec checks the template against the published
// CloudFormation resource specification: every resource type exists,
// every required property is set, no property is unknown, and every
// value has its property's type.
func TestCloudFormationSpec(t *testing.T) {
	spec := loadSpec(t)
	tmpl := template(t)
	res := tmpl["Resources"].(map[string]any)
	if len(res) == 0 {
		t.Fatal("no resources")
	}
	for id, r := range res {
		r := r.(map[string]any)
		props, _ := r["Properties"].(map[string]any)
		for _, e := range spec.checkResource(r["Type"].(string), props) {
			t.Errorf("%s: %s", id, e)
		}
		if c, ok := r["Condition"]; ok {
			if _, ok := tmpl["Conditions"].(map[string]any)[c.(string)]; !ok {
				t.Errorf("%s: unknown condition %v", id, c)
			}
		}
	}
	t.Logf("checked %d resources against CloudFormation resource specification %s", len(res), spec.ResourceSpecificationVersion)
}

// TestSpecCheckBites proves the check refuses what it should, so a pass
// means something.
func TestSpecCheckBites(t *testing.T) {
	spec := loadSpec(t)
	tests := []struct {
		name, typ string
		props     map[string]any
		want      string
	}{
		{"unknown type", "AWS::IAM::Rolez", map[string]any{}, "unknown resource type"},
		{"missing required", "AWS::IAM::Role", map[string]any{}, "required property AssumeRolePolicyDocument missing"},
		{"unknown property", "AWS::IAM::Role", map[string]any{"AssumeRolePolicyDocument": map[string]any{}, "Trust": "x"}, "unknown property Trust"},
		{"wrong primitive", "AWS::IAM::Role", map[string]any{"AssumeRolePolicyDocument": map[string]any{}, "MaxSessionDuration": "3600"}, "is not a Integer"},
		{"wrong nested", "AWS::S3::Bucket", map[string]any{"VersioningConfiguration": map[string]any{"Enabled": true}}, "unknown property Enabled"},
		{"list of wrong items", "AWS::IAM::Role", map[string]any{"AssumeRolePolicyDocument": map[string]any{}, "ManagedPolicyArns": []any{1.0}}, "is not a String"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := spec.checkResource(tt.typ, tt.props)
			if !strings.Contains(strings.Join(errs, "\n"), tt.want) {
				t.Errorf("errors %q lack %q", errs, tt.want)
			}
		})
	}
}
