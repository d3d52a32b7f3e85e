package provider

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkNew measures what the provider does at every start: decode the
// aws schema and convert it for the protocol. It reads the schema
// `make tf-aws` wrote (NUON_TFAWS_SCHEMA, default in the cache).
func BenchmarkNew(b *testing.B) {
	path := os.Getenv("NUON_TFAWS_SCHEMA")
	if path == "" {
		home, _ := os.UserHomeDir()
		path = filepath.Join(home, ".cache", "nuon", "terraform-providers", "aws-6.25.0", "schema.json")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("no schema (%v): run make tf-aws", err)
	}
	for b.Loop() {
		doc, err := Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := New(doc, name, "6.25.0"); err != nil {
			b.Fatal(err)
		}
	}
}
