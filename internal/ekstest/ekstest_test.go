package ekstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"nuon.dev/nuon/internal/ststest"
)

const (
	role    = "arn:aws:iam::222222222222:role/nuon-acme-provision"
	cluster = "nuon-acme"
)

// setup is STS (with the provision role assumed once) and EKS with one
// cluster, and an SDK client signed with the role's credentials.
func setup(t testing.TB) (*ststest.Server, *Server, *eks.Client, ststest.Credentials) {
	t.Helper()
	st := ststest.New(t)
	st.AddCaller("AKIATENANT", "arn:aws:iam::111111111111:user/tenant")
	st.AddRole(ststest.Role{ARN: role, TrustedAccount: "111111111111"})
	stsClient := sts.New(sts.Options{Region: "eu-west-1", BaseEndpoint: aws.String(st.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIATENANT", "secret", "")})
	if _, err := stsClient.AssumeRole(context.Background(), &sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("nuon-install-acme")}); err != nil {
		t.Fatal(err)
	}
	c := st.Issued()[0]
	s := New(t, st.URL)
	s.AddCluster(Cluster{Name: cluster, ARN: "arn:aws:eks:eu-west-1:222222222222:cluster/nuon-acme", Endpoint: "https://127.0.0.1:6443",
		CA: []byte("-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n"), PublicAccess: true, PublicAccessCIDRs: []string{"203.0.113.7/32"}})
	client := eks.New(eks.Options{Region: "eu-west-1", BaseEndpoint: aws.String(s.URL),
		Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)})
	return st, s, client, c
}

// TestAPI drives the stand-in with aws-sdk-go-v2's EKS client: what it
// answers decodes, and its errors are the SDK's typed errors.
func TestAPI(t *testing.T) {
	_, s, c, creds := setup(t)
	ctx := context.Background()
	d, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(cluster)})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := base64.StdEncoding.DecodeString(aws.ToString(d.Cluster.CertificateAuthority.Data))
	if aws.ToString(d.Cluster.Endpoint) != "https://127.0.0.1:6443" || !strings.Contains(string(ca), "ca") || d.Cluster.Status != ekstypes.ClusterStatusActive ||
		!d.Cluster.ResourcesVpcConfig.EndpointPublicAccess || d.Cluster.AccessConfig.AuthenticationMode != ekstypes.AuthenticationModeApi {
		t.Errorf("DescribeCluster: %+v", d.Cluster)
	}
	if _, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String("other")}); !errors.As(err, new(*ekstypes.ResourceNotFoundException)) {
		t.Errorf("unknown cluster: %v", err)
	}
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role), Tags: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	if de, err := c.DescribeAccessEntry(ctx, &eks.DescribeAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role)}); err != nil || de.AccessEntry.Tags["k"] != "v" || aws.ToString(de.AccessEntry.PrincipalArn) != role {
		t.Errorf("DescribeAccessEntry: %+v %v", de, err)
	}
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role)}); !errors.As(err, new(*ekstypes.ResourceInUseException)) {
		t.Errorf("second CreateAccessEntry: %v", err)
	}
	if _, err := c.CreateAccessEntry(ctx, &eks.CreateAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String("arn:aws:sts::222222222222:assumed-role/x/y")}); !errors.As(err, new(*ekstypes.InvalidParameterException)) {
		t.Errorf("session ARN as principal: %v", err)
	}
	if _, err := c.AssociateAccessPolicy(ctx, &eks.AssociateAccessPolicyInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role),
		PolicyArn: aws.String(ClusterAdminPolicy), AccessScope: &ekstypes.AccessScope{Type: ekstypes.AccessScopeTypeCluster}}); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListAccessEntries(ctx, &eks.ListAccessEntriesInput{ClusterName: aws.String(cluster)})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{role}, l.AccessEntries); d != "" {
		t.Errorf("ListAccessEntries (-want +got):\n%s", d)
	}
	want := []AccessEntry{{PrincipalARN: role, Policies: []Policy{{ARN: ClusterAdminPolicy, Scope: "cluster"}}, Tags: map[string]string{"k": "v"}}}
	if d := cmp.Diff(want, s.AccessEntries(cluster), cmpopts.IgnoreFields(AccessEntry{}, "Created")); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
	if _, err := c.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteAccessEntry(ctx, &eks.DeleteAccessEntryInput{ClusterName: aws.String(cluster), PrincipalArn: aws.String(role)}); !errors.As(err, new(*ekstypes.ResourceNotFoundException)) {
		t.Errorf("second DeleteAccessEntry: %v", err)
	}
	for _, call := range s.Calls() {
		if call.AccessKey != creds.AccessKeyID {
			t.Errorf("%s signed by %q", call.Op, call.AccessKey)
		}
	}
}

// TestWebhook authenticates tokens as the API server would ask: a token
// made by the SDK's presigner for this cluster maps to the role only while
// its access entry exists; a token for another cluster, or not a token,
// is refused.
func TestWebhook(t *testing.T) {
	st, s, _, creds := setup(t)
	token := func(clusterID string) string {
		client := sts.New(sts.Options{Region: "eu-west-1", BaseEndpoint: aws.String(st.URL),
			Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)})
		r, err := sts.NewPresignClient(client).PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
			po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
				o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue(ClusterIDHeader, clusterID), smithyhttp.AddHeaderValue("X-Amz-Expires", "60"))
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(r.URL))
	}
	review := func(tok string) tokenReviewStatus {
		body, _ := json.Marshal(map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": tok}})
		resp, err := http.Post(s.WebhookURL(cluster), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tr tokenReview
		if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
			t.Fatal(err)
		}
		return tr.Status
	}
	if r := review(token(cluster)); r.Authenticated || !strings.Contains(r.Error, "no access entry") {
		t.Errorf("without an entry: %+v", r)
	}
	s.PutAccessEntry(cluster, AccessEntry{PrincipalARN: role, Policies: []Policy{{ARN: ClusterAdminPolicy, Scope: "cluster"}}})
	r := review(token(cluster))
	if !r.Authenticated || r.User.Username != "arn:aws:sts::222222222222:assumed-role/nuon-acme-provision/nuon-install-acme" || !cmp.Equal(r.User.Groups, []string{"system:masters"}) {
		t.Errorf("with an entry: %+v %+v", r, r.User)
	}
	for name, tok := range map[string]string{
		"another cluster's token": token("nuon-other"),
		"a bearer token":          "not-an-eks-token",
		"another host":            TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte("https://sts.evil.example/?Action=GetCallerIdentity&Version=2011-06-15")),
	} {
		if r := review(tok); r.Authenticated {
			t.Errorf("%s: authenticated as %+v", name, r.User)
		}
	}
}
