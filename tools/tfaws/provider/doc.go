// Package provider is a Terraform provider (plugin protocol 6) that serves
// a schema document and nothing else. Terraform checks a configuration
// against the schema a provider serves (unknown arguments, missing
// required ones, types, block counts) before it calls the provider, so
// serving the real schema is enough for `terraform validate` and for
// `terraform test` with `mock_provider`, where terraform answers plan and
// apply itself from the schema. Everything that would reach the cloud
// (plan, apply, read, import) fails with ErrSchemaOnly's message.
package provider
