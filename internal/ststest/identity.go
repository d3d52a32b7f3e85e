package ststest

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// emptySHA256 is the payload hash of a presigned GET: the SHA-256 of no
// body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// presignedIdentity answers a presigned GetCallerIdentity (GET /?Action=
// GetCallerIdentity&X-Amz-Credential=…&X-Amz-Signature=…), what an EKS
// token is and what aws-iam-authenticator forwards to STS. The signature
// is checked for real, over the headers it names (x-k8s-aws-id among them
// for an EKS token), with the secret of credentials this server issued:
// a token altered in any signed part, made with another secret, expired
// or for credentials this server did not issue is refused.
func (s *Server) presignedIdentity(w http.ResponseWriter, r *http.Request, call *Call) string {
	q := r.URL.Query()
	cred := strings.Split(q.Get("X-Amz-Credential"), "/")
	if len(cred) != 5 || cred[3] != "sts" || cred[4] != "aws4_request" || q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return writeError(w, http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
	}
	s.mu.Lock()
	c, known := s.byKey[cred[0]]
	s.mu.Unlock()
	if !known || q.Get("X-Amz-Security-Token") != c.SessionToken {
		return writeError(w, http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid.")
	}
	call.Caller = c.Arn
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	expires, err2 := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || err2 != nil || expires < 1 || expires > 604800 {
		return writeError(w, http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Date and X-Amz-Expires must be set")
	}
	now := s.now()
	if now.After(signed.Add(time.Duration(expires)*time.Second)) || now.After(c.Expiration) {
		return writeError(w, http.StatusForbidden, "ExpiredToken", "The security token included in the request is expired")
	}
	if !validSignature(r, q, cred, c, signed) {
		return writeError(w, http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
	}
	return writeIdentity(w, r, c.Arn)
}

// validSignature signs the request again, as the SDK's presigner does, and
// compares the signatures.
func validSignature(r *http.Request, q url.Values, cred []string, c Credentials, signed time.Time) bool {
	want := q.Get("X-Amz-Signature")
	q = cloneValues(q)
	q.Del("X-Amz-Signature")
	u := *r.URL
	u.Scheme, u.Host, u.RawQuery = "http", r.Host, q.Encode()
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return false
	}
	for _, h := range strings.Split(q.Get("X-Amz-SignedHeaders"), ";") {
		if h != "host" {
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	got, _, err := v4.NewSigner().PresignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken},
		req, emptySHA256, "sts", cred[2], signed)
	if err != nil {
		return false
	}
	gu, err := url.Parse(got)
	return err == nil && want != "" && gu.Query().Get("X-Amz-Signature") == want &&
		gu.Query().Get("X-Amz-SignedHeaders") == q.Get("X-Amz-SignedHeaders")
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// Identity is STS's GetCallerIdentity result.
type Identity struct {
	Account string `xml:"Account" json:"Account"`
	Arn     string `xml:"Arn" json:"Arn"`
	UserID  string `xml:"UserId" json:"UserId"`
}

// IdentityResponse is GetCallerIdentity's answer as JSON (Accept:
// application/json, as aws-iam-authenticator asks).
type IdentityResponse struct {
	GetCallerIdentityResponse struct {
		GetCallerIdentityResult Identity
		ResponseMetadata        struct{ RequestId string }
	}
}

type identityXML struct {
	XMLName   xml.Name `xml:"GetCallerIdentityResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Result    Identity `xml:"GetCallerIdentityResult"`
	RequestID string   `xml:"ResponseMetadata>RequestId"`
}

// writeIdentity answers GetCallerIdentity for arn, in JSON when asked
// (aws-iam-authenticator does), else in XML (the SDK).
func writeIdentity(w http.ResponseWriter, r *http.Request, arn string) string {
	id := Identity{Arn: arn, UserID: "AIDA" + strings.ToUpper(random(12))}
	if m := accountRe.FindStringSubmatch(arn); m != nil {
		id.Account = m[1]
	}
	if i := strings.LastIndex(arn, "/"); strings.Contains(arn, ":assumed-role/") && i > 0 {
		id.UserID = "AROA" + strings.ToUpper(random(8)) + ":" + arn[i+1:]
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		var resp IdentityResponse
		resp.GetCallerIdentityResponse.GetCallerIdentityResult = id
		resp.GetCallerIdentityResponse.ResponseMetadata.RequestId = random(16)
		b, _ := json.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return ""
	}
	writeXML(w, http.StatusOK, identityXML{Xmlns: Namespace, Result: id, RequestID: random(16)})
	return ""
}
