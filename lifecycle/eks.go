package lifecycle

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/fluxcd/pkg/ssa"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nuon.dev/nuon/stack"
)

// Defaults of the EKS bootstrap.
const (
	// DefaultAccessWait bounds how long the bootstrap waits for a new
	// access entry to let the provision role in (EKS takes seconds).
	DefaultAccessWait = 2 * time.Minute
	// DefaultKubeTimeout bounds each request to the cluster's API server.
	DefaultKubeTimeout = 30 * time.Second
)

// BootstrapPolicy is the access policy the provision role holds while it
// bootstraps the agent. Cluster-wide admin, for minutes: manifests/
// creates Namespaces (cluster-scoped) and Roles whose rules RBAC lets
// only a holder of those rules grant; a namespace-scoped policy can do
// neither.
const BootstrapPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

// Token is the EKS token format (aws-iam-authenticator's): this prefix
// and the base64url of a presigned STS GetCallerIdentity URL that signs
// the x-k8s-aws-id header with the cluster's name.
const (
	tokenPrefix     = "k8s-aws-v1."
	clusterIDHeader = "x-k8s-aws-id"
	// tokenExpires is the presigned URL's X-Amz-Expires, as
	// aws-iam-authenticator's client sets it; tokens are made again
	// before it passes (tokenRefresh).
	tokenExpires = "60"
	tokenRefresh = 45 * time.Second
)

// ErrUnreachable: the cluster's API endpoint did not answer from here
// (private only, or not open to this host's egress address). Not retried.
var ErrUnreachable = errors.New("cluster endpoint unreachable")

func (o *Options) awsTimeout() time.Duration {
	if o.AWS.Timeout > 0 {
		return o.AWS.Timeout
	}
	return stack.DefaultTimeout
}

// eksClient is the EKS API as the assumed role, with a deadline on every
// connection.
func (o *Options) eksClient(creds *stack.Credentials) *eks.Client {
	return eks.New(eks.Options{
		Region:      o.AWS.Region,
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		HTTPClient:  awshttp.NewBuildableClient().WithTimeout(o.awsTimeout()),
	}, func(eo *eks.Options) {
		if o.AWS.EKSEndpoint != "" {
			eo.BaseEndpoint = aws.String(o.AWS.EKSEndpoint)
		}
	})
}

// awsCall runs one AWS call under the deadline and classifies its error:
// a refusal wraps stack.ErrAccessDenied, no answer stack.ErrTimeout.
func (o *Options) awsCall(ctx context.Context, what string, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, o.awsTimeout())
	defer cancel()
	err := call(ctx)
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AccessDeniedException" || apiErr.ErrorCode() == "UnrecognizedClientException"):
		return fmt.Errorf("%s: %w: %s", what, stack.ErrAccessDenied, apiErr.ErrorMessage())
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w (%s): %w", what, stack.ErrTimeout, o.awsTimeout(), context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// cluster is what the bootstrap needs of the EKS cluster.
type cluster struct {
	name, endpoint string
	ca             []byte
	public         bool
	publicCIDRs    []string
}

func (o *Options) describeCluster(ctx context.Context, c *eks.Client, name string) (*cluster, error) {
	var out *eks.DescribeClusterOutput
	err := o.awsCall(ctx, "describe cluster "+name, func(ctx context.Context) (err error) {
		out, err = c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
		return err
	})
	if err != nil {
		return nil, err
	}
	cl := out.Cluster
	if cl == nil || cl.Endpoint == nil || cl.CertificateAuthority == nil || cl.CertificateAuthority.Data == nil {
		return nil, fmt.Errorf("cluster %s: no endpoint or certificate authority yet", name)
	}
	if cl.Status != "" && cl.Status != ekstypes.ClusterStatusActive && cl.Status != ekstypes.ClusterStatusUpdating {
		return nil, fmt.Errorf("cluster %s is %s, not ACTIVE", name, cl.Status)
	}
	ca, err := base64.StdEncoding.DecodeString(*cl.CertificateAuthority.Data)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: certificate authority: %w", name, err)
	}
	res := &cluster{name: name, endpoint: *cl.Endpoint, ca: ca}
	if v := cl.ResourcesVpcConfig; v != nil {
		res.public, res.publicCIDRs = v.EndpointPublicAccess, v.PublicAccessCidrs
	}
	return res, nil
}

// bootstrapTag marks the access entries the bootstrap makes, and only
// those are reused and deleted.
const bootstrapTag, bootstrapTagValue = "nuon.dev/purpose", "agent-bootstrap"

// ErrStandingAccess: the provision role has an access entry the bootstrap
// did not make (the sandbox's access_entries, or by hand). The bootstrap
// neither widens nor deletes it; remove it, since the role needs access
// only while the bootstrap runs. Not retried.
var ErrStandingAccess = errors.New("standing access entry")

// grantAccess gives principal a cluster-wide BootstrapPolicy access entry,
// tagged as the bootstrap's. An entry a killed run left (tagged so) is
// reused (reused is true); any other is ErrStandingAccess.
func (o *Options) grantAccess(ctx context.Context, c *eks.Client, clusterName, principal string) (reused bool, err error) {
	err = o.awsCall(ctx, "create access entry for "+principal, func(ctx context.Context) error {
		_, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{
			ClusterName: aws.String(clusterName), PrincipalArn: aws.String(principal), Type: aws.String("STANDARD"),
			Tags: map[string]string{"nuon.dev/install": o.ID, bootstrapTag: bootstrapTagValue},
		})
		return err
	})
	var inUse *ekstypes.ResourceInUseException
	if errors.As(err, &inUse) {
		var out *eks.DescribeAccessEntryOutput
		err = o.awsCall(ctx, "describe access entry of "+principal, func(ctx context.Context) (err error) {
			out, err = c.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(clusterName), PrincipalArn: aws.String(principal)})
			return err
		})
		if err != nil {
			return false, err
		}
		if out.AccessEntry == nil || out.AccessEntry.Tags[bootstrapTag] != bootstrapTagValue {
			return false, fmt.Errorf("cluster %s: %w for %s, not made by the agent bootstrap (the sandbox's access_entries?): remove it; the bootstrap gives the role access only while it runs", clusterName, ErrStandingAccess, principal)
		}
		reused = true
	}
	if err != nil {
		return false, err
	}
	err = o.awsCall(ctx, "associate "+BootstrapPolicy+" with "+principal, func(ctx context.Context) error {
		_, err := c.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{
			ClusterName: aws.String(clusterName), PrincipalArn: aws.String(principal), PolicyArn: aws.String(BootstrapPolicy),
			AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeCluster},
		})
		return err
	})
	return reused, err
}

// revokeAccess deletes principal's access entry (and with it its
// policies); an entry already gone is fine. It runs even when ctx is
// cancelled: no standing access outlives an interrupted bootstrap.
func (o *Options) revokeAccess(ctx context.Context, c *eks.Client, clusterName, principal string) (deleted bool, err error) {
	err = o.awsCall(context.WithoutCancel(ctx), "delete access entry for "+principal, func(ctx context.Context) error {
		_, err := c.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(clusterName), PrincipalArn: aws.String(principal)})
		return err
	})
	var notFound *ekstypes.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return false, nil
	}
	return err == nil, err
}

// hasAccessEntry tells whether principal still has an entry on the
// cluster (ListAccessEntries, every page).
func (o *Options) hasAccessEntry(ctx context.Context, c *eks.Client, clusterName, principal string) (bool, error) {
	var token *string
	for {
		var out *eks.ListAccessEntriesOutput
		err := o.awsCall(ctx, "list access entries of "+clusterName, func(ctx context.Context) (err error) {
			out, err = c.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(clusterName), NextToken: token})
			return err
		})
		if err != nil {
			return false, err
		}
		for _, p := range out.AccessEntries {
			if p == principal {
				return true, nil
			}
		}
		if token = out.NextToken; token == nil || *token == "" {
			return false, nil
		}
	}
}

// eksToken makes an EKS token for the cluster from creds: a presigned STS
// GetCallerIdentity URL that signs x-k8s-aws-id (the aws-sdk-go-v2
// presigner; nothing is sent).
func (o *Options) eksToken(ctx context.Context, creds *stack.Credentials, clusterName string) (string, error) {
	client := sts.New(sts.Options{
		Region:      o.AWS.Region,
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
	}, func(so *sts.Options) {
		if o.AWS.STSEndpoint != "" {
			so.BaseEndpoint = aws.String(o.AWS.STSEndpoint)
		}
	})
	req, err := sts.NewPresignClient(client).PresignGetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		po.ClientOptions = append(po.ClientOptions, func(so *sts.Options) {
			so.APIOptions = append(so.APIOptions,
				smithyhttp.AddHeaderValue(clusterIDHeader, clusterName),
				smithyhttp.AddHeaderValue("X-Amz-Expires", tokenExpires))
		})
	})
	if err != nil {
		return "", fmt.Errorf("presign the EKS token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(req.URL)), nil
}

// tokenTransport puts a fresh EKS token on every request, made again
// before the presigned URL expires.
type tokenTransport struct {
	next http.RoundTripper
	make func(ctx context.Context) (string, error)
	now  func() time.Time // default time.Now

	mu    sync.Mutex
	token string
	made  time.Time
}

var _ http.RoundTripper = (*tokenTransport)(nil)

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now
	if t.now != nil {
		now = t.now
	}
	t.mu.Lock()
	if t.token == "" || now().Sub(t.made) > tokenRefresh {
		tok, err := t.make(req.Context())
		if err != nil {
			t.mu.Unlock()
			return nil, err
		}
		t.token, t.made = tok, now()
	}
	tok := t.token
	t.mu.Unlock()
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	return t.next.RoundTrip(req)
}

// eksConfig is a client configuration for the cluster that authenticates
// as creds with EKS tokens.
func (o *Options) eksConfig(cl *cluster, creds *stack.Credentials) *rest.Config {
	return &rest.Config{
		Host:            cl.endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: cl.ca},
		Timeout:         o.kubeTimeout(),
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return &tokenTransport{next: rt, make: func(ctx context.Context) (string, error) { return o.eksToken(ctx, creds, cl.name) }}
		},
	}
}

func (o *Options) kubeTimeout() time.Duration {
	if o.AWS.KubeTimeout > 0 {
		return o.AWS.KubeTimeout
	}
	return DefaultKubeTimeout
}

// waitForAccess asks the cluster who we are (SelfSubjectReview) until the
// access entry takes effect (401 until then), for at most AccessWait. An
// endpoint that does not answer is ErrUnreachable at once.
func (o *Options) waitForAccess(ctx context.Context, cfg *rest.Config, cl *cluster) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	wait := o.AWS.AccessWait
	if wait <= 0 {
		wait = DefaultAccessWait
	}
	deadline := time.Now().Add(wait)
	for {
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		var status apierrors.APIStatus
		switch {
		case err == nil:
			return r.Status.UserInfo.Username, nil
		case ctx.Err() != nil:
			return "", ctx.Err()
		case !errors.As(err, &status):
			how := "it is private only: run nuon install create from inside the VPC, or give --bootstrap-cidr this host's egress CIDR"
			if cl.public {
				how = fmt.Sprintf("its public access is limited to %v: is this host's egress address in it?", cl.publicCIDRs)
			}
			return "", fmt.Errorf("cluster %s at %s: %w (%v); %s", cl.name, cl.endpoint, ErrUnreachable, err, how)
		case !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err):
			return "", fmt.Errorf("cluster %s: %w", cl.name, err)
		case time.Now().After(deadline):
			return "", fmt.Errorf("cluster %s: the provision role's access entry did not take effect within %s: %w", cl.name, wait, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// awsAgent bootstraps the agent on the sandbox's EKS cluster, as the
// provision role, with access that lasts only as long as the bootstrap:
//
//  1. assume the provision role (ExternalId, deadline);
//  2. describe the cluster: its endpoint and CA;
//  3. create the role's access entry with BootstrapPolicy (one left by a
//     killed run is reused);
//  4. wait until the cluster lets the role in (EKS tokens, SelfSubjectReview);
//  5. apply manifests/ by server-side apply (ApplyAgent);
//  6. delete the access entry, whatever happened in 4 and 5, and check
//     that it is gone.
//
// The endpoint phase then closes the public endpoint (closeEndpoint).
func awsAgent(ctx context.Context, o *Options, st *state) (string, string, error) {
	outs := st.outputs
	if outs == nil {
		var err error
		if outs, err = readOutputs(o); err != nil {
			return "", "", fmt.Errorf("sandbox outputs: %w", err)
		}
	}
	if outs.Cluster.Name == "" {
		return "", "", fmt.Errorf("sandbox outputs name no cluster")
	}
	creds, err := o.assume(ctx, stack.Provision)
	if err != nil {
		return "", "", err
	}
	c := o.eksClient(creds)
	cl, err := o.describeCluster(ctx, c, outs.Cluster.Name)
	if err != nil {
		return "", "", err
	}
	principal := o.roleARN(stack.Provision)
	reused, err := o.grantAccess(ctx, c, cl.name, principal)
	if errors.Is(err, ErrStandingAccess) {
		return "", "", err // not ours to delete
	}
	if reused {
		o.Logger.InfoContext(ctx, "reusing the access entry an earlier run left", "install", o.ID, "principal", principal)
	}
	var cs *ssa.ChangeSet
	if err == nil {
		cs, err = o.applyToEKS(ctx, outs, cl, creds)
	}
	_, rerr := o.revokeAccess(ctx, c, cl.name, principal)
	if err != nil || rerr != nil {
		return "", "", errors.Join(err, rerr)
	}
	still, err := o.hasAccessEntry(ctx, c, cl.name, principal)
	if err != nil {
		return "", "", err
	}
	if still {
		return "", "", fmt.Errorf("cluster %s: the access entry of %s is still there after DeleteAccessEntry", cl.name, principal)
	}
	changed := 0
	for _, e := range cs.Entries {
		if e.Action != ssa.UnchangedAction {
			changed++
		}
	}
	res := Done
	if changed == 0 {
		res = Unchanged
	}
	return res, fmt.Sprintf("%d of %d objects applied to %s as %s; its access entry removed", changed, len(cs.Entries), cl.endpoint, principal), nil
}

// applyToEKS waits for the cluster to let the provision role in and
// applies manifests/. The agent pulls from ECR with its own role (EKS Pod
// Identity): no registry password goes to the cluster.
func (o *Options) applyToEKS(ctx context.Context, outs *Outputs, cl *cluster, creds *stack.Credentials) (*ssa.ChangeSet, error) {
	cfg := o.eksConfig(cl, creds)
	user, err := o.waitForAccess(ctx, cfg, cl)
	if err != nil {
		return nil, err
	}
	o.Logger.InfoContext(ctx, "in the cluster", "install", o.ID, "user", user)
	b := Bootstrap{Install: o.ID, Repo: o.Repo, Registry: outs.Registry.URL}
	if b.Key, err = os.ReadFile(o.path(KeyFile)); err != nil {
		return nil, err
	}
	if err = o.bootstrapTrust(&b); err != nil {
		return nil, err
	}
	if b.GitToken, err = o.gitToken(); err != nil {
		return nil, err
	}
	return ApplyAgent(ctx, cfg, b)
}
