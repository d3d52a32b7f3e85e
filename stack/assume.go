package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

// Outcomes of AssumeRole that callers branch on.
var (
	// ErrAccessDenied: STS refused (wrong or missing ExternalId, a role
	// that does not trust the caller, a deleted stack). Do not retry:
	// the customer's stack or the install's ExternalId must change.
	ErrAccessDenied = errors.New("access denied")
	// ErrTimeout: STS did not answer within the deadline. Try again.
	ErrTimeout = errors.New("no answer within the deadline")
)

// assumeConfig holds AssumeRole's options.
type assumeConfig struct {
	timeout     time.Duration
	duration    time.Duration
	sessionName string
	endpoint    string
}

// AssumeOption configures AssumeRole.
type AssumeOption func(*assumeConfig)

// Defaults of AssumeRole.
const (
	// DefaultTimeout bounds the whole call, retries included.
	DefaultTimeout = 30 * time.Second
	// DefaultDuration is how long the credentials last.
	DefaultDuration = time.Hour
	// DefaultSessionName names the session in the customer's CloudTrail.
	DefaultSessionName = "nuon"
)

// WithTimeout bounds the call, retries included; default DefaultTimeout.
func WithTimeout(d time.Duration) AssumeOption { return func(c *assumeConfig) { c.timeout = d } }

// WithDuration sets how long the credentials last; default
// DefaultDuration (at most the role's MaxSessionDuration).
func WithDuration(d time.Duration) AssumeOption { return func(c *assumeConfig) { c.duration = d } }

// WithSessionName names the session (shows in the customer's CloudTrail);
// default DefaultSessionName.
func WithSessionName(n string) AssumeOption { return func(c *assumeConfig) { c.sessionName = n } }

// WithEndpoint sends STS calls to endpoint instead of AWS's (tests,
// VPC endpoints); default the SDK's resolution.
func WithEndpoint(endpoint string) AssumeOption {
	return func(c *assumeConfig) { c.endpoint = endpoint }
}

// Credentials are an assumed role's temporary credentials. They print
// and log redacted; hand them to Terraform with Env.
type Credentials struct {
	RoleARN         string
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	Region          string
	Expires         time.Time
}

// Env is the credentials as environment variables for a Terraform run
// (terraform-exec's SetEnv): never put them on a command line.
func (c *Credentials) Env() map[string]string {
	env := map[string]string{
		"AWS_ACCESS_KEY_ID":     c.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": c.SecretAccessKey,
		"AWS_SESSION_TOKEN":     c.SessionToken,
	}
	if c.Region != "" {
		env["AWS_REGION"] = c.Region
	}
	return env
}

// String names the role and the expiry, never the secrets.
func (c *Credentials) String() string {
	return fmt.Sprintf("credentials for %s until %s (redacted)", c.RoleARN, c.Expires.UTC().Format(time.RFC3339))
}

// GoString is String, so %#v does not print the secrets either.
func (c *Credentials) GoString() string { return c.String() }

// LogValue keeps the secrets out of slog.
func (c *Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("role", c.RoleARN), slog.Time("expires", c.Expires))
}

var _ slog.LogValuer = (*Credentials)(nil)

// AssumeRole assumes roleARN in the customer's account with externalID,
// as the tenant principal whose credentials cfg holds, through
// aws-sdk-go-v2's STS client (stscreds). Every call has a deadline: an
// endpoint that does not answer fails with ErrTimeout instead of hanging.
// A refusal is ErrAccessDenied, naming the role.
func AssumeRole(ctx context.Context, cfg aws.Config, roleARN, externalID string, opts ...AssumeOption) (*Credentials, error) {
	c := assumeConfig{timeout: DefaultTimeout, duration: DefaultDuration, sessionName: DefaultSessionName}
	for _, o := range opts {
		o(&c)
	}
	if externalID == "" {
		return nil, fmt.Errorf("assume role %s: no external id", roleARN)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cfg = cfg.Copy()
	// A connection that never answers must not outlive the deadline, even
	// where a context is not watched.
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTimeout(c.timeout)
	client := sts.NewFromConfig(cfg, func(o *sts.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
	})
	provider := stscreds.NewAssumeRoleProvider(client, roleARN, func(o *stscreds.AssumeRoleOptions) {
		o.ExternalID = aws.String(externalID)
		o.RoleSessionName = c.sessionName
		o.Duration = c.duration
	})
	creds, err := provider.Retrieve(ctx)
	if err != nil {
		var apiErr smithy.APIError
		switch {
		case errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AccessDenied" || apiErr.ErrorCode() == "InvalidClientTokenId"):
			return nil, fmt.Errorf("assume role %s: %w: %s (check the role's trust policy and the install's ExternalId)", roleARN, ErrAccessDenied, apiErr.ErrorMessage())
		case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("assume role %s: %w (%s): %w", roleARN, ErrTimeout, c.timeout, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("assume role %s: %w", roleARN, err)
	}
	return &Credentials{
		RoleARN: roleARN, AccessKeyID: creds.AccessKeyID, SecretAccessKey: creds.SecretAccessKey,
		SessionToken: creds.SessionToken, Region: cfg.Region, Expires: creds.Expires,
	}, nil
}
