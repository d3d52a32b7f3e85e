package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"nuon.dev/nuon/tools/tfaws/schema"
)

// ErrSchemaOnly is the message of every call that would need the cloud.
const ErrSchemaOnly = "this provider serves only the schema of %s %s (for terraform validate and terraform test with mock_provider); it cannot plan, apply, read or import real resources"

// Server serves one provider's schema.
type Server struct {
	name, version string
	schemas       *tfprotov6.GetProviderSchemaResponse
}

var _ tfprotov6.ProviderServer = (*Server)(nil)

// New makes a server for the provider called name (its registry address,
// registry.terraform.io/hashicorp/aws) in the schema document doc.
func New(doc *schema.Document, name, version string) (*Server, error) {
	p, ok := doc.ProviderSchemas[name]
	if !ok {
		return nil, fmt.Errorf("schema: no provider %s", name)
	}
	parsed := types{}
	resp := &tfprotov6.GetProviderSchemaResponse{
		ServerCapabilities:       &tfprotov6.ServerCapabilities{GetProviderSchemaOptional: false, PlanDestroy: true},
		ResourceSchemas:          map[string]*tfprotov6.Schema{},
		DataSourceSchemas:        map[string]*tfprotov6.Schema{},
		Functions:                map[string]*tfprotov6.Function{},
		EphemeralResourceSchemas: map[string]*tfprotov6.Schema{},
		ListResourceSchemas:      map[string]*tfprotov6.Schema{},
		ActionSchemas:            map[string]*tfprotov6.ActionSchema{},
	}
	var err error
	if resp.Provider, err = convert(p.Provider, parsed); err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	for n, s := range p.ResourceSchemas {
		if resp.ResourceSchemas[n], err = convert(s, parsed); err != nil {
			return nil, fmt.Errorf("resource %s: %w", n, err)
		}
	}
	for n, s := range p.DataSourceSchemas {
		if resp.DataSourceSchemas[n], err = convert(s, parsed); err != nil {
			return nil, fmt.Errorf("data source %s: %w", n, err)
		}
	}
	return &Server{name: name, version: version, schemas: resp}, nil
}

func convert(s *schema.Schema, parsed types) (*tfprotov6.Schema, error) {
	if s == nil {
		return &tfprotov6.Schema{Block: &tfprotov6.SchemaBlock{}}, nil
	}
	b, err := convertBlock(s.Block, parsed)
	if err != nil {
		return nil, err
	}
	return &tfprotov6.Schema{Version: s.Version, Block: b}, nil
}

var nesting = map[string]tfprotov6.SchemaNestedBlockNestingMode{
	schema.NestingSingle: tfprotov6.SchemaNestedBlockNestingModeSingle,
	schema.NestingList:   tfprotov6.SchemaNestedBlockNestingModeList,
	schema.NestingSet:    tfprotov6.SchemaNestedBlockNestingModeSet,
	schema.NestingMap:    tfprotov6.SchemaNestedBlockNestingModeMap,
}

// types memoizes parsed attribute types: most of the aws schema's
// thousands of attributes share a handful of types.
type types map[string]tftypes.Type

func (ts types) parse(raw []byte) (tftypes.Type, error) {
	if t, ok := ts[string(raw)]; ok {
		return t, nil
	}
	t, err := tftypes.ParseJSONType(raw) //nolint:staticcheck // the JSON type form is what the document holds
	if err != nil {
		return nil, err
	}
	ts[string(raw)] = t
	return t, nil
}

func convertBlock(b *schema.Block, parsed types) (*tfprotov6.SchemaBlock, error) {
	out := &tfprotov6.SchemaBlock{}
	if b == nil {
		return out, nil
	}
	attrs, err := convertAttributes(b.Attributes, parsed)
	if err != nil {
		return nil, err
	}
	out.Attributes = attrs
	for _, n := range sortedKeys(b.BlockTypes) {
		nb := b.BlockTypes[n]
		mode, ok := nesting[nb.NestingMode]
		if !ok {
			return nil, fmt.Errorf("%s: unknown nesting mode %q", n, nb.NestingMode)
		}
		inner, err := convertBlock(nb.Block, parsed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out.BlockTypes = append(out.BlockTypes, &tfprotov6.SchemaNestedBlock{
			TypeName: n, Block: inner, Nesting: mode, MinItems: nb.MinItems, MaxItems: nb.MaxItems,
		})
	}
	return out, nil
}

var objectNesting = map[string]tfprotov6.SchemaObjectNestingMode{
	schema.NestingSingle: tfprotov6.SchemaObjectNestingModeSingle,
	schema.NestingList:   tfprotov6.SchemaObjectNestingModeList,
	schema.NestingSet:    tfprotov6.SchemaObjectNestingModeSet,
	schema.NestingMap:    tfprotov6.SchemaObjectNestingModeMap,
}

func convertAttributes(in map[string]*schema.Attribute, parsed types) ([]*tfprotov6.SchemaAttribute, error) {
	var out []*tfprotov6.SchemaAttribute
	for _, n := range sortedKeys(in) {
		a := in[n]
		sa := &tfprotov6.SchemaAttribute{Name: n, Required: a.Required, Optional: a.Optional, Computed: a.Computed}
		if a.NestedType != nil {
			mode, ok := objectNesting[a.NestedType.NestingMode]
			if !ok {
				return nil, fmt.Errorf("%s: unknown nesting mode %q", n, a.NestedType.NestingMode)
			}
			attrs, err := convertAttributes(a.NestedType.Attributes, parsed)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
			sa.NestedType = &tfprotov6.SchemaObject{Attributes: attrs, Nesting: mode}
		} else {
			t, err := parsed.parse(a.Type)
			if err != nil {
				return nil, fmt.Errorf("%s: type %s: %w", n, a.Type, err)
			}
			sa.Type = t
		}
		out = append(out, sa)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Decode reads a schema document.
func Decode(b []byte) (*schema.Document, error) {
	var doc schema.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if doc.FormatVersion != schema.FormatVersion {
		return nil, fmt.Errorf("schema: format_version %q, want %q", doc.FormatVersion, schema.FormatVersion)
	}
	return &doc, nil
}

func (s *Server) schemaOnly() []*tfprotov6.Diagnostic {
	return []*tfprotov6.Diagnostic{{
		Severity: tfprotov6.DiagnosticSeverityError,
		Summary:  "Schema-only provider",
		Detail:   fmt.Sprintf(ErrSchemaOnly, s.name, s.version),
	}}
}

// GetMetadata lists the resource and data source types.
func (s *Server) GetMetadata(context.Context, *tfprotov6.GetMetadataRequest) (*tfprotov6.GetMetadataResponse, error) {
	resp := &tfprotov6.GetMetadataResponse{ServerCapabilities: s.schemas.ServerCapabilities}
	for _, n := range sortedKeys(s.schemas.ResourceSchemas) {
		resp.Resources = append(resp.Resources, tfprotov6.ResourceMetadata{TypeName: n})
	}
	for _, n := range sortedKeys(s.schemas.DataSourceSchemas) {
		resp.DataSources = append(resp.DataSources, tfprotov6.DataSourceMetadata{TypeName: n})
	}
	return resp, nil
}

// GetProviderSchema serves the schema.
func (s *Server) GetProviderSchema(context.Context, *tfprotov6.GetProviderSchemaRequest) (*tfprotov6.GetProviderSchemaResponse, error) {
	return s.schemas, nil
}

// GetResourceIdentitySchemas serves no identity schemas.
func (s *Server) GetResourceIdentitySchemas(context.Context, *tfprotov6.GetResourceIdentitySchemasRequest) (*tfprotov6.GetResourceIdentitySchemasResponse, error) {
	return &tfprotov6.GetResourceIdentitySchemasResponse{IdentitySchemas: map[string]*tfprotov6.ResourceIdentitySchema{}}, nil
}

// ValidateProviderConfig accepts what terraform already checked against
// the schema.
func (s *Server) ValidateProviderConfig(_ context.Context, req *tfprotov6.ValidateProviderConfigRequest) (*tfprotov6.ValidateProviderConfigResponse, error) {
	return &tfprotov6.ValidateProviderConfigResponse{PreparedConfig: req.Config}, nil
}

// ConfigureProvider succeeds: configuring reaches nothing.
func (s *Server) ConfigureProvider(context.Context, *tfprotov6.ConfigureProviderRequest) (*tfprotov6.ConfigureProviderResponse, error) {
	return &tfprotov6.ConfigureProviderResponse{}, nil
}

// StopProvider has nothing to stop.
func (s *Server) StopProvider(context.Context, *tfprotov6.StopProviderRequest) (*tfprotov6.StopProviderResponse, error) {
	return &tfprotov6.StopProviderResponse{}, nil
}

// ValidateResourceConfig accepts what terraform already checked against
// the schema.
func (s *Server) ValidateResourceConfig(context.Context, *tfprotov6.ValidateResourceConfigRequest) (*tfprotov6.ValidateResourceConfigResponse, error) {
	return &tfprotov6.ValidateResourceConfigResponse{}, nil
}

// UpgradeResourceState refuses: there is no real state to upgrade.
func (s *Server) UpgradeResourceState(context.Context, *tfprotov6.UpgradeResourceStateRequest) (*tfprotov6.UpgradeResourceStateResponse, error) {
	return &tfprotov6.UpgradeResourceStateResponse{Diagnostics: s.schemaOnly()}, nil
}

// ReadResource refuses.
func (s *Server) ReadResource(context.Context, *tfprotov6.ReadResourceRequest) (*tfprotov6.ReadResourceResponse, error) {
	return &tfprotov6.ReadResourceResponse{Diagnostics: s.schemaOnly()}, nil
}

// PlanResourceChange refuses.
func (s *Server) PlanResourceChange(context.Context, *tfprotov6.PlanResourceChangeRequest) (*tfprotov6.PlanResourceChangeResponse, error) {
	return &tfprotov6.PlanResourceChangeResponse{Diagnostics: s.schemaOnly()}, nil
}

// ApplyResourceChange refuses.
func (s *Server) ApplyResourceChange(context.Context, *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	return &tfprotov6.ApplyResourceChangeResponse{Diagnostics: s.schemaOnly()}, nil
}

// ImportResourceState refuses.
func (s *Server) ImportResourceState(context.Context, *tfprotov6.ImportResourceStateRequest) (*tfprotov6.ImportResourceStateResponse, error) {
	return &tfprotov6.ImportResourceStateResponse{Diagnostics: s.schemaOnly()}, nil
}

// MoveResourceState refuses.
func (s *Server) MoveResourceState(context.Context, *tfprotov6.MoveResourceStateRequest) (*tfprotov6.MoveResourceStateResponse, error) {
	return &tfprotov6.MoveResourceStateResponse{Diagnostics: s.schemaOnly()}, nil
}

// UpgradeResourceIdentity refuses.
func (s *Server) UpgradeResourceIdentity(context.Context, *tfprotov6.UpgradeResourceIdentityRequest) (*tfprotov6.UpgradeResourceIdentityResponse, error) {
	return &tfprotov6.UpgradeResourceIdentityResponse{Diagnostics: s.schemaOnly()}, nil
}

// GenerateResourceConfig refuses.
func (s *Server) GenerateResourceConfig(context.Context, *tfprotov6.GenerateResourceConfigRequest) (*tfprotov6.GenerateResourceConfigResponse, error) {
	return &tfprotov6.GenerateResourceConfigResponse{Diagnostics: s.schemaOnly()}, nil
}

// ValidateDataResourceConfig accepts what terraform already checked.
func (s *Server) ValidateDataResourceConfig(context.Context, *tfprotov6.ValidateDataResourceConfigRequest) (*tfprotov6.ValidateDataResourceConfigResponse, error) {
	return &tfprotov6.ValidateDataResourceConfigResponse{}, nil
}

// ReadDataSource refuses.
func (s *Server) ReadDataSource(context.Context, *tfprotov6.ReadDataSourceRequest) (*tfprotov6.ReadDataSourceResponse, error) {
	return &tfprotov6.ReadDataSourceResponse{Diagnostics: s.schemaOnly()}, nil
}

// CallFunction refuses: the provider serves no functions.
func (s *Server) CallFunction(context.Context, *tfprotov6.CallFunctionRequest) (*tfprotov6.CallFunctionResponse, error) {
	return &tfprotov6.CallFunctionResponse{Error: &tfprotov6.FunctionError{Text: fmt.Sprintf(ErrSchemaOnly, s.name, s.version)}}, nil
}

// GetFunctions serves no functions.
func (s *Server) GetFunctions(context.Context, *tfprotov6.GetFunctionsRequest) (*tfprotov6.GetFunctionsResponse, error) {
	return &tfprotov6.GetFunctionsResponse{Functions: map[string]*tfprotov6.Function{}}, nil
}

// ValidateEphemeralResourceConfig accepts: there are none.
func (s *Server) ValidateEphemeralResourceConfig(context.Context, *tfprotov6.ValidateEphemeralResourceConfigRequest) (*tfprotov6.ValidateEphemeralResourceConfigResponse, error) {
	return &tfprotov6.ValidateEphemeralResourceConfigResponse{}, nil
}

// OpenEphemeralResource refuses.
func (s *Server) OpenEphemeralResource(context.Context, *tfprotov6.OpenEphemeralResourceRequest) (*tfprotov6.OpenEphemeralResourceResponse, error) {
	return &tfprotov6.OpenEphemeralResourceResponse{Diagnostics: s.schemaOnly()}, nil
}

// RenewEphemeralResource refuses.
func (s *Server) RenewEphemeralResource(context.Context, *tfprotov6.RenewEphemeralResourceRequest) (*tfprotov6.RenewEphemeralResourceResponse, error) {
	return &tfprotov6.RenewEphemeralResourceResponse{Diagnostics: s.schemaOnly()}, nil
}

// CloseEphemeralResource has nothing to close.
func (s *Server) CloseEphemeralResource(context.Context, *tfprotov6.CloseEphemeralResourceRequest) (*tfprotov6.CloseEphemeralResourceResponse, error) {
	return &tfprotov6.CloseEphemeralResourceResponse{}, nil
}
