// Package schema is the provider schema document tfaws writes and serves:
// the format of `terraform providers schema -json` (format_version 1.0),
// so a generated schema can be diffed against one terraform printed.
package schema
