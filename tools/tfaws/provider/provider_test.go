package provider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"nuon.dev/nuon/tools/tfaws/schema"
)

const name = "registry.terraform.io/hashicorp/aws"

func widgetServer(t *testing.T) *Server {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "gen", "testdata", "widget.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Decode([]byte(`{"format_version":"1.0","provider_schemas":{"` + name + `":{"provider":{"version":0,"block":{"attributes":{"region":{"type":"string","optional":true}}}},"resource_schemas":{"aws_widget":` + string(b) + `},"data_source_schemas":{}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(doc, name, "6.25.0")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchemaServed(t *testing.T) {
	s := widgetServer(t)
	resp, err := s.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.ResourceSchemas["aws_widget"]
	if w == nil {
		t.Fatal("aws_widget not served")
	}
	want := tftypes.Set{ElementType: tftypes.Object{AttributeTypes: map[string]tftypes.Type{
		"code": tftypes.Number, "reasons": tftypes.Set{ElementType: tftypes.String}}}}
	var got tftypes.Type
	for _, a := range w.Block.Attributes {
		if a.Name == "status" {
			got = a.Type
		}
	}
	if got == nil || !got.Equal(want) {
		t.Errorf("status type = %v, want %v", got, want)
	}
	var rule *tfprotov6.SchemaNestedBlock
	for _, b := range w.Block.BlockTypes {
		if b.TypeName == "rule" {
			rule = b
		}
	}
	if rule == nil || rule.Nesting != tfprotov6.SchemaNestedBlockNestingModeSet {
		t.Errorf("rule block = %+v, want a set block", rule)
	}
}

func TestCloudCallsRefused(t *testing.T) {
	s := widgetServer(t)
	ctx := context.Background()
	plan, _ := s.PlanResourceChange(ctx, &tfprotov6.PlanResourceChangeRequest{TypeName: "aws_widget"})
	apply, _ := s.ApplyResourceChange(ctx, &tfprotov6.ApplyResourceChangeRequest{TypeName: "aws_widget"})
	read, _ := s.ReadDataSource(ctx, &tfprotov6.ReadDataSourceRequest{TypeName: "aws_widget"})
	for what, diags := range map[string][]*tfprotov6.Diagnostic{"plan": plan.Diagnostics, "apply": apply.Diagnostics, "read": read.Diagnostics} {
		if len(diags) != 1 || diags[0].Severity != tfprotov6.DiagnosticSeverityError || !strings.Contains(diags[0].Detail, "serves only the schema") {
			t.Errorf("%s: diagnostics %+v, want the schema-only error", what, diags)
		}
	}
}

func TestBadSchemaRefused(t *testing.T) {
	doc := &schema.Document{FormatVersion: "1.0", ProviderSchemas: map[string]*schema.Provider{name: {
		ResourceSchemas: map[string]*schema.Schema{"aws_x": {Block: &schema.Block{Attributes: map[string]*schema.Attribute{"a": {Type: []byte(`["nope"]`)}}}}},
	}}}
	if _, err := New(doc, name, "6.25.0"); err == nil || !strings.Contains(err.Error(), "aws_x") {
		t.Errorf("New = %v, want an error naming aws_x", err)
	}
	if _, err := New(doc, "registry.terraform.io/hashicorp/other", "1"); err == nil {
		t.Error("New accepted a provider missing from the document")
	}
}
