// Command tfaws-gen writes the schema of the Terraform provider an unpacked
// @cdktf/provider-aws npm package was generated from, in the format of
// `terraform providers schema -json`.
//
//	tfaws-gen -package DIR -o schema.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"nuon.dev/nuon/tools/tfaws/gen"
)

func main() {
	pkg := flag.String("package", "", "the unpacked npm package (the folder holding package.json and lib/)")
	out := flag.String("o", "", "file to write the schema to (default stdout)")
	flag.Parse()
	if *pkg == "" {
		fmt.Fprintln(os.Stderr, "usage: tfaws-gen -package DIR [-o FILE]")
		os.Exit(2)
	}
	if err := run(*pkg, *out); err != nil {
		fmt.Fprintf(os.Stderr, "tfaws-gen: %v\n", err)
		os.Exit(1)
	}
}

func run(pkg, out string) error {
	doc, err := gen.Generate(pkg)
	if err != nil {
		return err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	for name, p := range doc.ProviderSchemas {
		fmt.Fprintf(os.Stderr, "tfaws-gen: %s: %d resources, %d data sources\n", name, len(p.ResourceSchemas), len(p.DataSourceSchemas))
	}
	return os.Rename(tmp, out)
}
