// Package gen turns the npm package @cdktf/provider-aws into the schema of
// the Terraform provider it was generated from (hashicorp/aws 6.25.0 for
// 21.22.1): every resource and data source, each attribute with its type
// and whether it is required, optional or computed, and nested blocks with
// their nesting mode and item limits.
//
// # Where each fact comes from
//
// Every lib/<name>/index.js (and its index-structs/*.js for the largest
// resources) holds, for the resource class and each nested struct, a
// synthesizeHclAttributes method or a <struct>ToHclTerraform function
// listing the exact snake_case names of the configurable attributes with
// isBlock, the kind (simple, list, set, map, struct) and the storage type
// (string, numberList, stringMap, <Struct>List…). A block whose value is
// mapped by listMapperHcl holds many items; one mapped directly holds at
// most one. The TypeScript source embedded in each file's source map keeps
// the generator's comments `// name - computed: X, optional: Y, required:
// Z` for every attribute of every class, and the getters of the
// computed-only attributes (getStringAttribute, a <Struct>List with its
// wrapsSet flag, a cdktf.StringMap…), which give their types. The class's
// tfResourceType constant is the Terraform type name.
//
// package/.jsii (131 MB) describes the same classes with camelCase names
// and optional flags, but not the snake_case names, the computed flags or
// the nesting modes. Generate streams it to cross-check the result
// (CheckJSII): the same resource, data source and provider classes, and
// for each as many required top-level arguments as its Config interface
// has required properties. On 21.22.1 that check found the one required
// map of objects (aws_lexv2models_bot_version's locale_specification),
// now a nested attribute.
//
// # Known approximations
//
// Nested attributes of plugin-framework resources appear as blocks in the
// cdktf package and are written as blocks. Schema versions are 0. A
// computed-only single nested object is written as an object attribute.
// Where cdktf gave up on a deep type it says "any" (aws_wafv2_web_acl's
// rule.statement): that becomes a dynamic attribute, and a set block
// holding one becomes a list block, since terraform refuses dynamic types
// inside set blocks.
package gen
