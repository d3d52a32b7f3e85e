package ststest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// FuzzPresignedIdentity feeds the presigned GetCallerIdentity check
// mutations of a valid URL's query and of its signed header: it never
// panics, and what it accepts carries the valid signature over the same
// header value (no forgery passes).
func FuzzPresignedIdentity(f *testing.F) {
	s := New(f)
	s.AddCaller("AKIATENANT", "arn:aws:iam::111111111111:user/tenant")
	role := "arn:aws:iam::222222222222:role/nuon-acme-provision"
	s.AddRole(Role{ARN: role, TrustedAccount: "111111111111"})
	if status, body := post(f, s, "AKIATENANT", url.Values{"Action": {"AssumeRole"}, "Version": {"2011-06-15"}, "RoleArn": {role}, "RoleSessionName": {"nuon"}}); status != 200 {
		f.Fatalf("AssumeRole: %d %s", status, body)
	}
	c := s.Issued()[0]
	client := sts.New(sts.Options{Region: "eu-west-1", BaseEndpoint: aws.String(s.URL),
		Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)})
	r, err := sts.NewPresignClient(client).PresignGetCallerIdentity(context.Background(), &sts.GetCallerIdentityInput{}, func(po *sts.PresignOptions) {
		po.ClientOptions = append(po.ClientOptions, func(o *sts.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("x-k8s-aws-id", "nuon-acme"))
		})
	})
	if err != nil {
		f.Fatal(err)
	}
	valid, _ := url.Parse(r.URL)
	sig := valid.Query().Get("X-Amz-Signature")
	f.Add(valid.RawQuery, "nuon-acme")
	f.Add("Action=GetCallerIdentity", "")
	f.Fuzz(func(t *testing.T, rawQuery, cluster string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = valid.Host
		req.URL.RawQuery = rawQuery
		if req.URL.Query().Get("Action") != "GetCallerIdentity" {
			return
		}
		req.Header.Set("x-k8s-aws-id", cluster)
		w := httptest.NewRecorder()
		s.serve(w, req)
		if w.Code == http.StatusOK && (req.URL.Query().Get("X-Amz-Signature") != sig || cluster != "nuon-acme") {
			t.Fatalf("accepted %q with x-k8s-aws-id %q", rawQuery, cluster)
		}
	})
}
