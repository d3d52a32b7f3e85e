package gen

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/tools/tfaws/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixture is testdata/widget.js with testdata/widget.ts in its source map,
// as tsc writes them in the cdktf package.
func fixture(t testing.TB) string {
	t.Helper()
	js, err := os.ReadFile(filepath.Join("testdata", "widget.js"))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := os.ReadFile(filepath.Join("testdata", "widget.ts"))
	if err != nil {
		t.Fatal(err)
	}
	sm, err := json.Marshal(map[string]any{"version": 3, "sourcesContent": []string{string(ts)}})
	if err != nil {
		t.Fatal(err)
	}
	return string(js) + "//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(sm) + "\n"
}

func TestParseGolden(t *testing.T) {
	got, err := Parse([]string{fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Type != "aws_widget" || got[0].Kind != KindResource {
		t.Fatalf("Parse = %+v, want one resource aws_widget", got)
	}
	b, err := json.MarshalIndent(got[0].Schema, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "widget.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(b)+"\n"); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
}

func TestStorageType(t *testing.T) {
	tests := []struct {
		storage, kind, want string
	}{
		{"string", "simple", `"string"`},
		{"boolean", "simple", `"bool"`},
		{"any", "simple", `"dynamic"`},
		{"stringList", "set", `["set","string"]`},
		{"numberList", "list", `["list","number"]`},
		{"stringMap", "map", `["map","string"]`},
		{"stringMapList", "list", `["list",["map","string"]]`},
		{"stringListList", "set", `["set",["list","string"]]`},
	}
	for _, tt := range tests {
		t.Run(tt.storage+"/"+tt.kind, func(t *testing.T) {
			got, err := storageType(tt.storage, tt.kind)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := storageType("WidgetRuleList", "list"); err == nil {
		t.Error("storageType accepted a struct storage type")
	}
}

// TestDynamicInSet checks that a set block holding a dynamic attribute
// becomes a list block, which terraform accepts.
func TestDynamicInSet(t *testing.T) {
	js := `function fooRuleToHclTerraform(struct) {
    const attrs = {
        statement: {
            value: cdktf.anyToHclTerraform(struct.statement),
            isBlock: false,
            type: "simple",
            storageClassType: "any",
        },
    };
    return attrs;
}
class Foo extends cdktf.TerraformResource {
    synthesizeHclAttributes() {
        const attrs = {
            rule: {
                value: cdktf.listMapperHcl(fooRuleToHclTerraform, true)(this._rule.internalValue),
                isBlock: true,
                type: "set",
                storageClassType: "FooRuleList",
            },
        };
    }
}
`
	ts := "export class Foo extends cdktf.TerraformResource {\n  public static readonly tfResourceType = \"aws_foo\";\n}\n"
	sm, _ := json.Marshal(map[string]any{"sourcesContent": []string{ts}})
	got, err := Parse([]string{js + "//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(sm) + "\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("Parse = %+v", got)
	}
	if m := got[0].Schema.Block.BlockTypes["rule"].NestingMode; m != "list" {
		t.Errorf("rule nesting = %q, want list", m)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(fixture(f))
	f.Add("class X extends cdktf.TerraformResource {\n    synthesizeHclAttributes() {\n")
	f.Add("//# sourceMappingURL=data:application/json;base64,e30=\n")
	f.Fuzz(func(t *testing.T, s string) {
		res, err := Parse([]string{s})
		if err != nil {
			return
		}
		for _, r := range res {
			if r.Schema == nil || r.Schema.Block == nil {
				t.Fatalf("%s: nil schema without an error", r.Type)
			}
			if _, err := json.Marshal(r.Schema); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestCheckJSII(t *testing.T) {
	res, err := Parse([]string{fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]Result{"aws_widget": res[0]}
	jsii := filepath.Join("testdata", "widget.jsii")
	diffs, err := CheckJSII(jsii, results)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Errorf("CheckJSII found differences in a consistent package: %q", diffs)
	}
	// A schema that lost a required argument, and one that lost a class.
	broken := *res[0].Schema.Block
	broken.Attributes = map[string]*schema.Attribute{}
	for k, v := range res[0].Schema.Block.Attributes {
		c := *v
		c.Required, c.Optional = false, true
		broken.Attributes[k] = &c
	}
	r := res[0]
	r.Schema = &schema.Schema{Block: &broken}
	diffs, err = CheckJSII(jsii, map[string]Result{"aws_widget": r})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"aws_widget: 0 required arguments, .jsii's WidgetConfig has 1"}, diffs); diff != "" {
		t.Errorf("differences (-want +got):\n%s", diff)
	}
	diffs, err = CheckJSII(jsii, map[string]Result{})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 2 || !strings.Contains(strings.Join(diffs, "\n"), "class widget.Widget (TerraformResource) in .jsii has no schema") {
		t.Errorf("a missing class: differences %q", diffs)
	}
}

// TestRequiredMap checks that a required map of objects becomes a
// required nested attribute (a block cannot be required in map mode).
func TestRequiredMap(t *testing.T) {
	js := `function barLocaleToHclTerraform(struct) {
    const attrs = {
        version: {
            value: cdktf.stringToHclTerraform(struct.version),
            isBlock: false,
            type: "simple",
            storageClassType: "string",
        },
    };
    return attrs;
}
class Bar extends cdktf.TerraformResource {
    synthesizeHclAttributes() {
        const attrs = {
            locale: {
                value: cdktf.hashMapperHcl(barLocaleToHclTerraform)(this._locale.internalValue),
                isBlock: true,
                type: "map",
                storageClassType: "BarLocaleMap",
            },
        };
    }
}
`
	ts := "export class Bar extends cdktf.TerraformResource {\n  public static readonly tfResourceType = \"aws_bar\";\n  // locale - computed: false, optional: false, required: true\n  private _locale = new BarLocaleMap(this, \"locale\");\n}\n"
	sm, _ := json.Marshal(map[string]any{"sourcesContent": []string{ts}})
	got, err := Parse([]string{js + "//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(sm) + "\n"})
	if err != nil {
		t.Fatal(err)
	}
	a := got[0].Schema.Block.Attributes["locale"]
	if a == nil || !a.Required || a.NestedType == nil || a.NestedType.NestingMode != "map" || a.NestedType.Attributes["version"] == nil {
		t.Fatalf("locale = %+v, want a required nested map attribute", a)
	}
}
