package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/spf13/pflag"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/sync"
	"nuon.dev/nuon/internal/oci"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/trust"
)

// registryPasswordEnv holds the password of --registry-username; a
// password on the command line would show in the process list.
const registryPasswordEnv = "NUON_REGISTRY_PASSWORD"

// RegistryOptions are the flags that reach OCI registries. Credentials
// come from the docker config file (~/.docker/config.json) as for docker
// and crane, from --registry-username for --registry, and from ECR's
// GetAuthorizationToken for ECR registries (ACCOUNT.dkr.ecr.REGION.
// amazonaws.com, or --registry with --ecr) with the usual AWS
// configuration (AWS_REGION, AWS_ENDPOINT_URL_ECR, instance roles, …).
type RegistryOptions struct {
	caFile, host, username string
	ecr                    bool
}

func (r *RegistryOptions) Flags(f *pflag.FlagSet) {
	f.StringVar(&r.caFile, "registry-ca", "", "PEM certificates to trust for registries besides the system's")
	f.StringVar(&r.host, "registry", "", "registry host (host[:port]) that --registry-username and --ecr apply to")
	f.StringVar(&r.username, "registry-username", "", "user name for --registry; the password is read from "+registryPasswordEnv)
	f.BoolVar(&r.ecr, "ecr", false, "--registry is Amazon ECR although its name does not say so (region from AWS_REGION)")
}

// args are the flags again, for a job process.
func (r *RegistryOptions) args() []string {
	var out []string
	if r.caFile != "" {
		out = append(out, "--registry-ca", r.caFile)
	}
	if r.host != "" {
		out = append(out, "--registry", r.host)
	}
	if r.username != "" {
		out = append(out, "--registry-username", r.username)
	}
	if r.ecr {
		out = append(out, "--ecr")
	}
	return out
}

// client returns the registry client and what makes repositories in ECR
// registries.
func (r *RegistryOptions) Client() (*oci.Client, *sync.ECRRegistries, error) {
	if (r.username != "" || r.ecr) && r.host == "" {
		return nil, nil, errors.New("--registry-username and --ecr need --registry")
	}
	ecrs := &sync.ECRRegistries{NewAPI: func(ctx context.Context, region string) (sync.ECRAPI, error) {
		var opts []func(*config.LoadOptions) error
		if region != "" {
			opts = append(opts, config.WithRegion(region))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, err
		}
		return ecr.NewFromConfig(cfg), nil
	}}
	if r.ecr {
		ecrs.Hosts = map[string]string{r.host: ""}
	}
	opts := []oci.ClientOption{oci.WithKeychain(authn.NewMultiKeychain(ecrs, authn.DefaultKeychain))}
	if r.caFile != "" {
		opts = append(opts, oci.WithCAFile(r.caFile))
	}
	if r.username != "" {
		opts = append(opts, oci.WithAuth(r.host, &authn.Basic{Username: r.username, Password: os.Getenv(registryPasswordEnv)}))
	}
	c, err := oci.NewClient(opts...)
	return c, ecrs, err
}

// syncOptions are the agent's flags for artifact sync.
type syncOptions struct {
	vendorKey string
	insecure  bool
	registry  RegistryOptions
	// provenance are the --provenance-source flags, REPO=REF.
	provenance []string
}

func (s *syncOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&s.vendorKey, "vendor-key", "", "the vendor's cosign public key (cosign.pub): verify and copy artifacts into the install registry before each job; without it no component with artifacts is applied")
	f.BoolVar(&s.insecure, "insecure-skip-artifact-verification", false, "development only: without --vendor-key, deploy artifacts nobody verified (the status says artifacts: Unverified)")
	f.StringArrayVar(&s.provenance, "provenance-source", nil, ProvenanceSourceHelp)
	s.registry.Flags(f)
}

// jobArgs adds the registry flags to a job's command line, and the
// vendor key that a vendor's plugin's artifact must verify with.
func (s *syncOptions) jobArgs(argv []string) []string {
	if s.vendorKey != "" {
		argv = append(argv, "--plugin-key", s.vendorKey)
	}
	return append(argv, s.registry.args()...)
}

// syncer returns the agent's Syncer; nil (no sync) without --vendor-key,
// when the agent refuses every artifact unless --insecure-skip-artifact-
// verification says otherwise.
func (s *syncOptions) syncer(log *slog.Logger, copied func(int64), root func() *trust.Root) (agent.Syncer, error) {
	switch {
	case s.vendorKey != "" && s.insecure:
		return nil, errors.New("--vendor-key and --insecure-skip-artifact-verification contradict each other: verify with the key, or drop it")
	case s.insecure:
		log.Warn("--insecure-skip-artifact-verification: artifacts are NOT verified nor copied; jobs deploy whatever the install registry (or --artifacts) holds, and the status says artifacts: Unverified")
		return nil, nil
	case s.vendorKey == "" && !rootNamesVendorKeys(root):
		log.Warn("no --vendor-key: artifacts cannot be verified, so no component with artifacts is synced or applied")
		return nil, nil
	}
	// The trust root's vendor-artifacts role, when it names one, verifies
	// artifacts; --vendor-key is the deprecated fallback.
	vendorKeys := &sync.VendorKeys{Root: root}
	if s.vendorKey != "" {
		fallback, err := oci.LoadPublicKey(s.vendorKey)
		if err != nil {
			return nil, err
		}
		vendorKeys.Fallback = fallback
		if rootNamesVendorKeys(root) {
			log.Warn("--vendor-key is deprecated and unused: the trust root's vendor-artifacts role names the vendor's artifact keys")
		}
	}
	key := vendorKeys
	c, ecrs, err := s.registry.Client()
	if err != nil {
		return nil, err
	}
	cfg := sync.Config{Client: c, Key: key, Repositories: ecrs, Logger: log, Copied: copied}
	if cfg.Provenance, err = provenanceConfig(s.provenance, root); err != nil {
		return nil, err
	}
	sy, err := sync.New(cfg)
	if err != nil {
		return nil, err
	}
	return sy, nil
}

// ArtifactsHelp is the help of --artifacts, for the agent and for `nuon job
// run`.
const ArtifactsHelp = "development and air-gapped tests only, not production: jobs read artifacts from `DIR`, an OCI image layout " +
	"(as 'crane pull --format=oci' writes one), instead of the install registry; every manifest and layer must hash to the digest the desired state pins"

// ArtifactSource is what a job reads artifacts from: the install
// registry, or with layout an OCI image layout on local disk. Both check
// every digest they read (see oci.Source and oci.Layout).
func (r *RegistryOptions) ArtifactSource(layout string) (reconciler.ArtifactSource, error) {
	if layout != "" {
		return oci.Layout{Path: layout}, nil
	}
	c, _, err := r.Client()
	if err != nil {
		return nil, fmt.Errorf("install registry: %w", err)
	}
	return &oci.Source{Client: c}, nil
}

// rootNamesVendorKeys reports whether the trust root the agent holds
// names the vendor-artifacts role.
func rootNamesVendorKeys(root func() *trust.Root) bool {
	if root == nil {
		return false
	}
	r := root()
	return r != nil && r.Role(trust.RoleVendorArtifacts) != nil
}
