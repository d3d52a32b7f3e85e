package ekstest

import (
	"context"
	"encoding/base64"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// FuzzVerify feeds the token check mutations of a valid token: it never
// panics, and what it accepts carries the valid token's signature (no
// forgery passes: every part of the URL but the signature is signed).
func FuzzVerify(f *testing.F) {
	_, s, _, creds := setup(f)
	client := sts.New(sts.Options{Region: "eu-west-1", BaseEndpoint: aws.String(s.sts.String()),
		Credentials: credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)})
	r, err := sts.NewPresignClient(client).PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue(ClusterIDHeader, cluster), smithyhttp.AddHeaderValue("X-Amz-Expires", "60"))
		})
	})
	if err != nil {
		f.Fatal(err)
	}
	valid, _ := url.Parse(r.URL)
	sig := valid.Query().Get("X-Amz-Signature")
	f.Add(TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(r.URL)))
	f.Add(r.URL)
	f.Add(TokenPrefix)
	f.Fuzz(func(t *testing.T, token string) {
		caller, _ := s.verify(httptest.NewRequest("POST", "/", nil), token, cluster)
		if caller == "" {
			return
		}
		b, _ := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, TokenPrefix))
		u, err := url.Parse(string(b))
		if err != nil || u.Query().Get("X-Amz-Signature") != sig {
			t.Fatalf("accepted a token not signed by the role: %q", b)
		}
	})
}
