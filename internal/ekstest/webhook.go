package ekstest

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TokenPrefix starts every EKS token.
const TokenPrefix = "k8s-aws-v1."

// ClusterIDHeader is the signed header that binds a token to one cluster.
const ClusterIDHeader = "x-k8s-aws-id"

// maxTokenAge is how long after X-Amz-Date aws-iam-authenticator accepts
// a token, whatever its X-Amz-Expires.
const maxTokenAge = 15 * time.Minute

// tokenReview is the part of authentication.k8s.io/v1 TokenReview the
// webhook reads and writes.
type tokenReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Token string `json:"token"`
	} `json:"spec"`
	Status tokenReviewStatus `json:"status"`
}

type tokenReviewStatus struct {
	Authenticated bool      `json:"authenticated"`
	User          *userInfo `json:"user,omitempty"`
	Error         string    `json:"error,omitempty"`
}

type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

var assumedRoleRe = regexp.MustCompile(`^arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([^/]+)/(.+)$`)

// authenticate answers the API server's TokenReview for cluster.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, cluster string) {
	var tr tokenReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&tr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a := Auth{Cluster: cluster}
	a.Caller, a.Reason = s.verify(r, tr.Spec.Token, cluster)
	if a.Caller != "" {
		principal := a.Caller
		if m := assumedRoleRe.FindStringSubmatch(a.Caller); m != nil {
			principal = "arn:" + m[1] + ":iam::" + m[2] + ":role/" + m[3]
		}
		s.mu.Lock()
		e, ok := s.entries[cluster][principal]
		if ok && time.Since(e.Created) < s.propagation {
			ok = false
		}
		if ok {
			a.User = e.Username
			if a.User == "" {
				a.User = a.Caller
			}
			a.Groups = slices.Clone(e.Groups)
			for _, p := range e.Policies {
				if p.ARN == ClusterAdminPolicy && p.Scope == "cluster" {
					a.Groups = append(a.Groups, "system:masters")
				} else {
					a.Groups = append(a.Groups, "eks:policy:"+p.ARN[strings.LastIndex(p.ARN, "/")+1:])
				}
			}
		} else {
			a.Reason = "no access entry for " + principal
		}
		s.mu.Unlock()
	}
	resp := tokenReview{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}
	if a.User != "" {
		resp.Status = tokenReviewStatus{Authenticated: true, User: &userInfo{Username: a.User, UID: "aws-iam-authenticator:" + a.Caller,
			Groups: a.Groups, Extra: map[string][]string{"arn": {a.Caller}}}}
	} else {
		resp.Status = tokenReviewStatus{Error: a.Reason}
	}
	s.mu.Lock()
	s.auths = append(s.auths, a)
	s.mu.Unlock()
	writeJSON(w, resp)
}

// verify checks the token's form and asks STS who made it; it returns the
// caller's ARN, or "" and why not.
func (s *Server) verify(r *http.Request, token, cluster string) (string, string) {
	raw, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", "not an EKS token"
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return "", "token is not base64url"
	}
	u, err := url.Parse(string(b))
	if err != nil || u.Host != s.sts.Host || u.Scheme != s.sts.Scheme || (u.Path != "/" && u.Path != "") {
		return "", "token is not a URL of the STS endpoint"
	}
	q := u.Query()
	if q.Get("Action") != "GetCallerIdentity" || q.Get("Version") != "2011-06-15" {
		return "", "token is not a GetCallerIdentity request"
	}
	if !slices.Contains(strings.Split(q.Get("X-Amz-SignedHeaders"), ";"), ClusterIDHeader) {
		return "", "token does not sign " + ClusterIDHeader
	}
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return "", "token has no X-Amz-Date"
	}
	if exp, err := strconv.Atoi(q.Get("X-Amz-Expires")); err != nil || exp < 1 || exp > int(maxTokenAge/time.Second) {
		return "", "token's X-Amz-Expires is missing or over 15 minutes"
	}
	if time.Since(signed) > maxTokenAge || time.Until(signed) > maxTokenAge {
		return "", "token is expired"
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err.Error()
	}
	req.Header.Set(ClusterIDHeader, cluster)
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return "", "STS: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return "", "STS refused the token: " + resp.Status + " " + string(body)
	}
	var id struct {
		GetCallerIdentityResponse struct {
			GetCallerIdentityResult struct{ Arn string }
		}
	}
	if err := json.Unmarshal(body, &id); err != nil || id.GetCallerIdentityResponse.GetCallerIdentityResult.Arn == "" {
		return "", "STS answered no ARN"
	}
	return id.GetCallerIdentityResponse.GetCallerIdentityResult.Arn, ""
}
