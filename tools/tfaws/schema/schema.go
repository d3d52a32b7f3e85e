package schema

import "encoding/json"

// FormatVersion is the version of the format written.
const FormatVersion = "1.0"

// Document is a `terraform providers schema -json` document.
type Document struct {
	FormatVersion   string               `json:"format_version"`
	ProviderSchemas map[string]*Provider `json:"provider_schemas"`
}

// Provider is one provider's schemas.
type Provider struct {
	Provider          *Schema            `json:"provider"`
	ResourceSchemas   map[string]*Schema `json:"resource_schemas"`
	DataSourceSchemas map[string]*Schema `json:"data_source_schemas"`
}

// Schema is the schema of the provider's configuration, a resource type or
// a data source.
type Schema struct {
	Version int64  `json:"version"`
	Block   *Block `json:"block"`
}

// Block is a configuration block: its attributes and nested block types.
type Block struct {
	Attributes map[string]*Attribute   `json:"attributes,omitempty"`
	BlockTypes map[string]*NestedBlock `json:"block_types,omitempty"`
}

// Attribute is one attribute. Type is a cty type in its JSON form
// ("string", ["list","string"], ["object",{...}], "dynamic").
type Attribute struct {
	Type       json.RawMessage `json:"type,omitempty"`
	NestedType *NestedType     `json:"nested_type,omitempty"`
	Required   bool            `json:"required,omitempty"`
	Optional   bool            `json:"optional,omitempty"`
	Computed   bool            `json:"computed,omitempty"`
}

// NestedType is the type of a nested attribute (plugin framework): its
// attributes and how they nest (single, list, set or map).
type NestedType struct {
	Attributes  map[string]*Attribute `json:"attributes"`
	NestingMode string                `json:"nesting_mode"`
}

// Nesting modes of a nested block.
const (
	NestingSingle = "single"
	NestingList   = "list"
	NestingSet    = "set"
	NestingMap    = "map"
)

// NestedBlock is a nested block type with its nesting mode.
type NestedBlock struct {
	NestingMode string `json:"nesting_mode"`
	Block       *Block `json:"block"`
	MinItems    int64  `json:"min_items,omitempty"`
	MaxItems    int64  `json:"max_items,omitempty"`
}
