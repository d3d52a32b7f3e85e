// Command terraform-provider-aws serves the schema of hashicorp/aws 6.25.0,
// embedded at build time by hack/tf-aws.sh (embedded/schema.json.gz,
// written by tfaws-gen; it is not committed), for terraform validate and terraform
// test with mock_provider. See package provider.
package main

import (
	"bytes"
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"nuon.dev/nuon/tools/tfaws/provider"
)

// name and version are the provider this binary stands in for.
const (
	name    = "registry.terraform.io/hashicorp/aws"
	version = "6.25.0"
)

// embedded holds schema.json.gz when hack/tf-aws.sh built the binary.
//
//go:embed embedded
var embedded embed.FS

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "terraform-provider-aws: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	gz, err := embedded.ReadFile("embedded/schema.json.gz")
	if err != nil {
		return errors.New("built without a schema: build it with hack/tf-aws.sh (make tf-aws)")
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	doc, err := provider.Decode(b)
	if err != nil {
		return err
	}
	srv, err := provider.New(doc, name, version)
	if err != nil {
		return err
	}
	return tf6server.Serve(name, func() tfprotov6.ProviderServer { return srv })
}
