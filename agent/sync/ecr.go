package sync

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	stdsync "sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	ecrtypes "github.com/aws/aws-sdk-go-v2/service/ecr/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// ECRAPI is what the agent calls of Amazon ECR's control plane.
type ECRAPI interface {
	GetAuthorizationToken(ctx context.Context, in *ecr.GetAuthorizationTokenInput, opts ...func(*ecr.Options)) (*ecr.GetAuthorizationTokenOutput, error)
	CreateRepository(ctx context.Context, in *ecr.CreateRepositoryInput, opts ...func(*ecr.Options)) (*ecr.CreateRepositoryOutput, error)
}

var _ ECRAPI = (*ecr.Client)(nil)

// ecrHost matches a private ECR registry host and captures its account
// and region.
var ecrHost = regexp.MustCompile(`^([0-9]{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$`)

// ParseECRHost reports whether host is an ECR registry host
// (ACCOUNT.dkr.ecr.REGION.amazonaws.com) and returns its account and
// region.
func ParseECRHost(host string) (account, region string, ok bool) {
	m := ecrHost.FindStringSubmatch(host)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// ECR gives the agent what an ECR install registry needs: basic-auth
// credentials from GetAuthorizationToken, refreshed before they expire,
// and repositories created before the first push to them. It is safe for
// concurrent use.
type ECR struct {
	api ECRAPI
	// registryID is the account whose registry this is; empty means the
	// caller's.
	registryID string
	// refreshBefore is how long before expiry a token is replaced.
	refreshBefore time.Duration
	now           func() time.Time

	mu      stdsync.Mutex
	token   authn.AuthConfig
	expires time.Time
	issued  time.Time
	created map[string]bool
}

// ECROption configures NewECR.
type ECROption func(*ECR)

// DefaultRefreshBefore replaces an ECR token this long before it expires
// (tokens last 12 hours), or at three quarters of its life if that is
// sooner.
const DefaultRefreshBefore = 30 * time.Minute

// WithRegistryID names the account that owns the registry.
func WithRegistryID(id string) ECROption { return func(e *ECR) { e.registryID = id } }

// WithRefreshBefore sets how long before expiry a token is replaced;
// default DefaultRefreshBefore.
func WithRefreshBefore(d time.Duration) ECROption { return func(e *ECR) { e.refreshBefore = d } }

// WithClock sets the clock; default time.Now.
func WithClock(now func() time.Time) ECROption { return func(e *ECR) { e.now = now } }

// NewECR returns an ECR for the registry api reaches.
func NewECR(api ECRAPI, opts ...ECROption) *ECR {
	e := &ECR{api: api, refreshBefore: DefaultRefreshBefore, now: time.Now, created: map[string]bool{}}
	for _, o := range opts {
		o(e)
	}
	return e
}

var (
	_ authn.Authenticator        = (*ECR)(nil)
	_ authn.ContextAuthenticator = (*ECR)(nil)
	_ Repositories               = (*ECR)(nil)
)

// Authorization implements authn.Authenticator.
func (e *ECR) Authorization() (*authn.AuthConfig, error) {
	return e.AuthorizationContext(context.Background())
}

// AuthorizationContext returns the current token as basic-auth
// credentials (user AWS), fetching a new one when none is held or the
// held one is about to expire.
func (e *ECR) AuthorizationContext(ctx context.Context) (*authn.AuthConfig, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	margin := min(e.refreshBefore, e.expires.Sub(e.issued)/4)
	if e.token.Password != "" && now.Before(e.expires.Add(-margin)) {
		tok := e.token
		return &tok, nil
	}
	in := &ecr.GetAuthorizationTokenInput{}
	if e.registryID != "" {
		in.RegistryIds = []string{e.registryID}
	}
	out, err := e.api.GetAuthorizationToken(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("ecr authorization token: %w", err)
	}
	if len(out.AuthorizationData) == 0 || out.AuthorizationData[0].AuthorizationToken == nil {
		return nil, errors.New("ecr authorization token: empty answer")
	}
	data := out.AuthorizationData[0]
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(data.AuthorizationToken))
	if err != nil {
		return nil, fmt.Errorf("ecr authorization token: %w", err)
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok || pass == "" {
		return nil, errors.New("ecr authorization token: not user:password")
	}
	e.token = authn.AuthConfig{Username: user, Password: pass}
	e.issued = now
	e.expires = now.Add(12 * time.Hour)
	if data.ExpiresAt != nil {
		e.expires = *data.ExpiresAt
	}
	tok := e.token
	return &tok, nil
}

// EnsureRepository creates repo in the registry unless this ECR created
// or found it before; a repository that exists already is fine.
func (e *ECR) EnsureRepository(ctx context.Context, repo name.Repository) error {
	key := repo.RepositoryStr()
	e.mu.Lock()
	done := e.created[key]
	e.mu.Unlock()
	if done {
		return nil
	}
	in := &ecr.CreateRepositoryInput{
		RepositoryName: aws.String(key),
		// Signature tags (sha256-….sig) gain signatures over time.
		ImageTagMutability: ecrtypes.ImageTagMutabilityMutable,
	}
	if e.registryID != "" {
		in.RegistryId = aws.String(e.registryID)
	}
	_, err := e.api.CreateRepository(ctx, in)
	var exists *ecrtypes.RepositoryAlreadyExistsException
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("ecr create repository %s: %w", key, err)
	}
	e.mu.Lock()
	e.created[key] = true
	e.mu.Unlock()
	return nil
}

// ECRRegistries is ECR for every ECR registry an agent meets: as an
// authn.Keychain it answers an ECR host with that registry's token, and as
// Repositories it creates repositories in ECR registries (and does
// nothing for other registries). A host is ECR when ParseECRHost says so
// or Hosts names it.
type ECRRegistries struct {
	// NewAPI returns the ECR control-plane client for region (empty: the
	// default region of the AWS configuration).
	NewAPI func(ctx context.Context, region string) (ECRAPI, error)
	// Hosts are ECR registries whose names do not say so (a VPC endpoint,
	// a test double), with their regions.
	Hosts map[string]string
	// Options apply to each registry's ECR.
	Options []ECROption

	mu     stdsync.Mutex
	byHost map[string]*ECR
}

var (
	_ authn.Keychain = (*ECRRegistries)(nil)
	_ Repositories   = (*ECRRegistries)(nil)
)

// registry returns the ECR of host, or nil when host is not ECR.
func (r *ECRRegistries) registry(ctx context.Context, host string) (*ECR, error) {
	account, region, ok := ParseECRHost(host)
	if !ok {
		if region, ok = r.Hosts[host]; !ok {
			return nil, nil
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.byHost[host]; ok {
		return e, nil
	}
	api, err := r.NewAPI(ctx, region)
	if err != nil {
		return nil, fmt.Errorf("ecr %s: %w", host, err)
	}
	opts := r.Options
	if account != "" {
		opts = append([]ECROption{WithRegistryID(account)}, opts...)
	}
	e := NewECR(api, opts...)
	if r.byHost == nil {
		r.byHost = map[string]*ECR{}
	}
	r.byHost[host] = e
	return e, nil
}

// Resolve implements authn.Keychain.
func (r *ECRRegistries) Resolve(res authn.Resource) (authn.Authenticator, error) {
	e, err := r.registry(context.Background(), res.RegistryStr())
	if err != nil {
		return nil, err
	}
	if e == nil {
		return authn.Anonymous, nil
	}
	return e, nil
}

// EnsureRepository implements Repositories.
func (r *ECRRegistries) EnsureRepository(ctx context.Context, repo name.Repository) error {
	e, err := r.registry(ctx, repo.RegistryStr())
	if err != nil || e == nil {
		return err
	}
	return e.EnsureRepository(ctx, repo)
}
