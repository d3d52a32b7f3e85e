package sync_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	ecrtypes "github.com/aws/aws-sdk-go-v2/service/ecr/types"
	"github.com/google/go-containerregistry/pkg/name"

	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/internal/ecrtest"
	"nuon.dev/nuon/internal/oci"
)

// ecrClient is the SDK's ECR client pointed at the fake, as
// AWS_ENDPOINT_URL_ECR would point it.
func ecrClient(fake *ecrtest.Server) *ecr.Client {
	return ecr.New(ecr.Options{
		Region:       fake.Region,
		Credentials:  aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")),
		BaseEndpoint: aws.String(fake.Endpoint),
	})
}

func TestParseECRHost(t *testing.T) {
	for host, want := range map[string][2]string{
		"111111111111.dkr.ecr.us-east-1.amazonaws.com":          {"111111111111", "us-east-1"},
		"222222222222.dkr.ecr-fips.us-gov-west-1.amazonaws.com": {"222222222222", "us-gov-west-1"},
		"333333333333.dkr.ecr.cn-north-1.amazonaws.com.cn":      {"333333333333", "cn-north-1"},
		"127.0.0.1:5000":                      {},
		"public.ecr.aws":                      {},
		"111.dkr.ecr.us-east-1.amazonaws.com": {},
	} {
		acct, region, ok := sync.ParseECRHost(host)
		if got := [2]string{acct, region}; got != want || ok != (want[0] != "") {
			t.Errorf("%s: %v %v, want %v", host, got, ok, want)
		}
	}
}

// TestECRFakeSpeaksTheProtocol drives the fake with the SDK alone: typed
// errors come back as the SDK decodes ECR's.
func TestECRFakeSpeaksTheProtocol(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	fake := ecrtest.New(t, w.install)
	api := ecrClient(fake)
	if _, err := api.CreateRepository(ctx, &ecr.CreateRepositoryInput{RepositoryName: aws.String("nuon-acme/shop/network")}); err != nil {
		t.Fatal(err)
	}
	_, err := api.CreateRepository(ctx, &ecr.CreateRepositoryInput{RepositoryName: aws.String("nuon-acme/shop/network")})
	var exists *ecrtypes.RepositoryAlreadyExistsException
	if !errors.As(err, &exists) {
		t.Fatalf("second CreateRepository: %v", err)
	}
	_, err = api.DescribeRepositories(ctx, &ecr.DescribeRepositoriesInput{RepositoryNames: []string{"nope"}})
	var notFound *ecrtypes.RepositoryNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("DescribeRepositories of a missing repository: %v", err)
	}
	out, err := api.GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
	if err != nil {
		t.Fatal(err)
	}
	d := out.AuthorizationData[0]
	if until := time.Until(aws.ToTime(d.ExpiresAt)); until < 11*time.Hour || until > 13*time.Hour {
		t.Errorf("token expires in %s", until)
	}
	if aws.ToString(d.ProxyEndpoint) != "https://"+fake.Host {
		t.Errorf("proxy endpoint %s", aws.ToString(d.ProxyEndpoint))
	}
}

// TestSyncIntoECR syncs through the ECR fake: repositories are created
// before the first push, credentials come from GetAuthorizationToken and
// are replaced before they expire.
func TestSyncIntoECR(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	now := time.Now()
	clock := func() time.Time { return now }
	fake := ecrtest.New(t, w.install, ecrtest.WithTokenLifetime(time.Hour), ecrtest.WithClock(func() time.Time { return clock() }))
	reg := sync.NewECR(ecrClient(fake), sync.WithRegistryID(fake.AccountID), sync.WithClock(func() time.Time { return clock() }))
	c, err := oci.NewClient(oci.WithKeychain(nil), oci.WithAuth(w.vendor.Host, nil), oci.WithAuth(fake.Host, reg), oci.WithCAFile(w.install.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	// One repository exists already: creating it again is fine.
	if _, err := ecrClient(fake).CreateRepository(ctx, &ecr.CreateRepositoryInput{RepositoryName: aws.String("nuon-acme/shop/network")}); err != nil {
		t.Fatal(err)
	}
	built := w.build(t, key(t, vendorKey), "network", "database", "api")
	arts := w.artifacts(built)
	for i := range arts {
		ref, _ := name.NewDigest(arts[i].Local)
		arts[i].Local = fake.Host + "/" + ref.Context().RepositoryStr() + "@" + ref.DigestStr()
	}
	s := w.syncer(t, func(cfg *sync.Config) { cfg.Client = c; cfg.Repositories = reg })
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	repos := fake.Repositories()
	slices.Sort(repos)
	if want := []string{"nuon-acme/shop/charts/api", "nuon-acme/shop/database", "nuon-acme/shop/network"}; !slices.Equal(repos, want) {
		t.Errorf("repositories %v, want %v", repos, want)
	}
	for _, a := range arts {
		ref, _ := name.NewDigest(a.Local)
		if ok, err := c.Head(ctx, ref, false); err != nil || !ok {
			t.Errorf("%s: %v %v", a.Local, ok, err)
		}
	}
	calls := fake.Calls()
	if calls["GetAuthorizationToken"] != 1 || calls["CreateRepository"] != 4 {
		t.Errorf("calls %v", calls)
	}

	// Three quarters into the token's hour it is replaced before use.
	now = now.Add(50 * time.Minute)
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	// Past the first token's expiry, syncing still works on the second.
	now = now.Add(20 * time.Minute)
	if err := s.Sync(ctx, arts); err != nil {
		t.Fatal(err)
	}
	calls = fake.Calls()
	if calls["GetAuthorizationToken"] != 2 || calls["CreateRepository"] != 4 {
		t.Errorf("calls %v", calls)
	}
	if n := fake.Expired(); n != 0 {
		t.Errorf("%d requests carried an expired token", n)
	}
}
