package ecrtest_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	ecrtypes "github.com/aws/aws-sdk-go-v2/service/ecr/types"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/ecrtest"
	"nuon.dev/nuon/internal/oci/ocitest"
)

// TestDeleteRepositories lists repositories in pages and deletes them
// with the SDK: a repository holding an image goes only with force, as
// in ECR, and every call is recorded with the key that signed it.
func TestDeleteRepositories(t *testing.T) {
	ctx := context.Background()
	fake := ecrtest.New(t, ocitest.Start(t, ocitest.Options{TLS: true, Username: "nuon", Password: "install-secret"}))
	api := ecr.New(ecr.Options{
		Region:       fake.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("ASIADEPROVISION", "secret", "token"),
		BaseEndpoint: aws.String(fake.Endpoint),
	})
	names := []string{"nuon/acme/api", "nuon/acme/charts/api", "nuon/acme/db", "nuon/other/api"}
	for _, n := range names {
		if _, err := api.CreateRepository(ctx, &ecr.CreateRepositoryInput{RepositoryName: aws.String(n)}); err != nil {
			t.Fatal(err)
		}
	}
	fake.PutImage(t, "nuon/acme/api", "v1")

	var listed []string
	pages := ecr.NewDescribeRepositoriesPaginator(api, &ecr.DescribeRepositoriesInput{MaxResults: aws.Int32(3)})
	n := 0
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, r := range out.Repositories {
			listed = append(listed, aws.ToString(r.RepositoryName))
		}
	}
	if d := cmp.Diff(names, listed); d != "" || n != 2 {
		t.Errorf("%d pages, repositories (-want +got):\n%s", n, d)
	}

	_, err := api.DeleteRepository(ctx, &ecr.DeleteRepositoryInput{RepositoryName: aws.String("nuon/acme/api")})
	if _, ok := errors.AsType[*ecrtypes.RepositoryNotEmptyException](err); !ok {
		t.Fatalf("delete of a repository with an image: %v, want RepositoryNotEmptyException", err)
	}
	for _, n := range []string{"nuon/acme/api", "nuon/acme/db"} {
		if _, err := api.DeleteRepository(ctx, &ecr.DeleteRepositoryInput{RepositoryName: aws.String(n), Force: true}); err != nil {
			t.Fatalf("forced delete of %s: %v", n, err)
		}
	}
	if _, err := api.DeleteRepository(ctx, &ecr.DeleteRepositoryInput{RepositoryName: aws.String("nuon/acme/db")}); !isNotFound(err) {
		t.Errorf("delete of a deleted repository: %v, want RepositoryNotFoundException", err)
	}
	if _, err := api.DescribeRepositories(ctx, &ecr.DescribeRepositoriesInput{RepositoryNames: []string{"nuon/acme/api"}}); !isNotFound(err) {
		t.Errorf("describe of a deleted repository: %v, want RepositoryNotFoundException", err)
	}
	left := fake.Repositories()
	slices.Sort(left)
	if d := cmp.Diff([]string{"nuon/acme/charts/api", "nuon/other/api"}, left); d != "" {
		t.Errorf("repositories left (-want +got):\n%s", d)
	}
	if got := fake.Signers("DeleteRepository"); !slices.Equal(got, []string{"ASIADEPROVISION"}) {
		t.Errorf("DeleteRepository signed by %v", got)
	}
}

func isNotFound(err error) bool {
	_, ok := errors.AsType[*ecrtypes.RepositoryNotFoundException](err)
	return ok
}
