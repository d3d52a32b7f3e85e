package ststest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestPresignedIdentity checks GetCallerIdentity presigned by the SDK, as
// an EKS token is: the issued session's ARN comes back; a changed signed
// header, another secret, an expired URL and unknown credentials are
// refused.
func TestPresignedIdentity(t *testing.T) {
	now := time.Now()
	s := New(t, WithClock(func() time.Time { return now }))
	s.AddCaller("AKIATENANT", "arn:aws:iam::111111111111:user/tenant")
	role := "arn:aws:iam::222222222222:role/nuon-acme-provision"
	s.AddRole(Role{ARN: role, TrustedAccount: "111111111111"})
	status, body := post(t, s, "AKIATENANT", map[string][]string{"Action": {"AssumeRole"}, "Version": {"2011-06-15"}, "RoleArn": {role}, "RoleSessionName": {"nuon-install-acme"}})
	if status != 200 {
		t.Fatalf("AssumeRole: %d %s", status, body)
	}
	c := s.Issued()[0]
	presign := func(secret string) string {
		client := sts.New(sts.Options{Region: "eu-west-1", BaseEndpoint: aws.String(s.URL),
			Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, secret, c.SessionToken)})
		r, err := sts.NewPresignClient(client).PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
			po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
				o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("x-k8s-aws-id", "nuon-acme"), smithyhttp.AddHeaderValue("X-Amz-Expires", "60"))
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.URL
	}
	get := func(u, cluster string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("x-k8s-aws-id", cluster)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	good := presign(c.SecretAccessKey)

	status, body = get(good, "nuon-acme")
	var id IdentityResponse
	if status != 200 || json.Unmarshal(body, &id) != nil || id.GetCallerIdentityResponse.GetCallerIdentityResult.Arn != "arn:aws:sts::222222222222:assumed-role/nuon-acme-provision/nuon-install-acme" {
		t.Fatalf("identity: %d %s", status, body)
	}
	for _, tt := range []struct{ name, url, cluster, code string }{
		{"another cluster", good, "nuon-other", "SignatureDoesNotMatch"},
		{"another secret", presign("guessed"), "nuon-acme", "SignatureDoesNotMatch"},
		{"unknown key", s.URL + "/?Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIANOBODY%2F20260101%2Feu-west-1%2Fsts%2Faws4_request", "nuon-acme", "InvalidClientTokenId"},
	} {
		status, body := get(tt.url, tt.cluster)
		if status != http.StatusForbidden || !contains(body, tt.code) {
			t.Errorf("%s: %d %s, want 403 %s", tt.name, status, body, tt.code)
		}
	}
	now = now.Add(61 * time.Second)
	if status, body := get(good, "nuon-acme"); status != http.StatusForbidden || !contains(body, "ExpiredToken") {
		t.Errorf("expired: %d %s", status, body)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
