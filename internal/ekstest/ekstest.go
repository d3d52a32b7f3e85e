package ekstest

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ClusterAdminPolicy is the ARN of the access policy that makes an entry
// a cluster administrator.
const ClusterAdminPolicy = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

// Cluster is a cluster the stand-in describes.
type Cluster struct {
	// Name and ARN name it.
	Name, ARN string
	// Endpoint is the API server's URL and CA its PEM certificate
	// authority (DescribeCluster gives it base64 encoded).
	Endpoint string
	CA       []byte
	// PublicAccess and PublicAccessCIDRs are the endpoint's public access,
	// as the sandbox's Terraform sets them.
	PublicAccess      bool
	PublicAccessCIDRs []string
}

// Policy is an access policy associated with an access entry.
type Policy struct {
	ARN        string
	Scope      string // cluster or namespace
	Namespaces []string
}

// AccessEntry is one principal's access to a cluster.
type AccessEntry struct {
	PrincipalARN string
	Username     string
	Groups       []string
	Policies     []Policy
	Tags         map[string]string
	// Created is when it was made; it authenticates from Created plus
	// the server's propagation delay on.
	Created time.Time
}

// Call is one API request the stand-in answered.
type Call struct {
	// Op is the operation (DescribeCluster, CreateAccessEntry, …).
	Op, Cluster, Principal string
	// AccessKey signed the request.
	AccessKey string
	// Code is the error answered, "" on success.
	Code string
}

// Auth is one authentication the webhook answered.
type Auth struct {
	Cluster string
	// Caller is the ARN STS gave for the token, "" when the token was
	// refused before or by STS.
	Caller string
	// User is who the cluster sees, "" when not authenticated.
	User   string
	Groups []string
	// Reason says why a token was refused.
	Reason string
}

// Server is the stand-in.
type Server struct {
	// URL is the EKS API endpoint (plain HTTP on loopback).
	URL string

	sts    *url.URL
	client *http.Client

	mu          sync.Mutex
	propagation time.Duration
	clusters    map[string]*Cluster
	entries     map[string]map[string]*AccessEntry // cluster → principal → entry
	calls       []Call
	auths       []Auth
}

// New serves the stand-in until the test ends. Tokens are checked against
// the STS endpoint stsURL (an internal/ststest server).
func New(t testing.TB, stsURL string) *Server {
	t.Helper()
	u, err := url.Parse(stsURL)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{sts: u, client: &http.Client{Timeout: 10 * time.Second},
		clusters: map[string]*Cluster{}, entries: map[string]map[string]*AccessEntry{}}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddCluster adds or replaces a cluster; its access entries stay.
func (s *Server) AddCluster(c Cluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters[c.Name] = &c
	if s.entries[c.Name] == nil {
		s.entries[c.Name] = map[string]*AccessEntry{}
	}
}

// WebhookURL is the token authenticator of cluster name, for
// kubetest.WithTokenWebhook. The cluster may be added after.
func (s *Server) WebhookURL(name string) string {
	return s.URL + "/authenticate/" + url.PathEscape(name)
}

// SetPropagation makes a new access entry authenticate only d after it
// was created, as EKS takes a moment to propagate it; default 0.
func (s *Server) SetPropagation(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.propagation = d
}

// AccessEntries returns a cluster's access entries, by principal.
func (s *Server) AccessEntries(cluster string) []AccessEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AccessEntry
	for _, e := range s.entries[cluster] {
		c := *e
		c.Groups = slices.Clone(e.Groups)
		c.Policies = slices.Clone(e.Policies)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PrincipalARN < out[j].PrincipalARN })
	return out
}

// PutAccessEntry adds an entry directly, as a run killed after
// CreateAccessEntry leaves it.
func (s *Server) PutAccessEntry(cluster string, e AccessEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[cluster] == nil {
		s.entries[cluster] = map[string]*AccessEntry{}
	}
	s.entries[cluster][e.PrincipalARN] = &e
}

// DeleteEntry removes an access entry directly, as its owner would; it
// tells whether there was one.
func (s *Server) DeleteEntry(cluster, principal string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.entries[cluster][principal]
	delete(s.entries[cluster], principal)
	return ok
}

// Calls returns the API calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Auths returns the webhook's authentications so far.
func (s *Server) Auths() []Auth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.auths)
}

var (
	credentialRe = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([A-Z0-9]+)/[0-9]{8}/[a-z0-9-]+/eks/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}$`)
	principalRe  = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+$`)
)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for i, seg := range segs {
		v, err := url.PathUnescape(seg)
		if err != nil {
			writeError(w, http.StatusBadRequest, "BadRequestException", "bad path")
			return
		}
		segs[i] = v
	}
	if len(segs) == 2 && segs[0] == "authenticate" && r.Method == http.MethodPost {
		s.authenticate(w, r, segs[1])
		return
	}
	call := Call{}
	if m := credentialRe.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		call.AccessKey = m[1]
	}
	if len(segs) >= 2 && segs[0] == "clusters" {
		call.Cluster = segs[1]
	}
	call.Code = s.answer(w, r, segs, &call)
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

// answer answers one API call and returns its error code.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, segs []string, call *Call) string {
	switch {
	case len(segs) == 2 && r.Method == http.MethodGet:
		call.Op = "DescribeCluster"
	case len(segs) == 3 && segs[2] == "access-entries" && r.Method == http.MethodPost:
		call.Op = "CreateAccessEntry"
	case len(segs) == 3 && segs[2] == "access-entries" && r.Method == http.MethodGet:
		call.Op = "ListAccessEntries"
	case len(segs) == 4 && segs[2] == "access-entries" && r.Method == http.MethodDelete:
		call.Op, call.Principal = "DeleteAccessEntry", segs[3]
	case len(segs) == 4 && segs[2] == "access-entries" && r.Method == http.MethodGet:
		call.Op, call.Principal = "DescribeAccessEntry", segs[3]
	case len(segs) == 5 && segs[2] == "access-entries" && segs[4] == "access-policies" && r.Method == http.MethodPost:
		call.Op, call.Principal = "AssociateAccessPolicy", segs[3]
	default:
		return writeError(w, http.StatusNotFound, "UnknownOperationException", r.Method+" "+r.URL.Path)
	}
	if call.AccessKey == "" {
		return writeError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clusters[call.Cluster]
	if !ok {
		return writeError(w, http.StatusNotFound, "ResourceNotFoundException", "No cluster found for name: "+call.Cluster+".")
	}
	entries := s.entries[c.Name]
	var body map[string]json.RawMessage
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
			return writeError(w, http.StatusBadRequest, "BadRequestException", "the body is not JSON: "+err.Error())
		}
	}
	str := func(k string) string {
		var v string
		_ = json.Unmarshal(body[k], &v)
		return v
	}
	now := float64(time.Now().Unix())
	entryJSON := func(e *AccessEntry) map[string]any {
		return map[string]any{"clusterName": c.Name, "principalArn": e.PrincipalARN, "kubernetesGroups": e.Groups,
			"username": e.Username, "type": "STANDARD", "createdAt": now, "modifiedAt": now, "tags": e.Tags,
			"accessEntryArn": strings.Replace(c.ARN, ":cluster/", ":access-entry/", 1) + "/" + e.PrincipalARN}
	}
	switch call.Op {
	case "DescribeCluster":
		cidrs := c.PublicAccessCIDRs
		if c.PublicAccess && len(cidrs) == 0 {
			cidrs = []string{"0.0.0.0/0"}
		}
		writeJSON(w, map[string]any{"cluster": map[string]any{
			"name": c.Name, "arn": c.ARN, "endpoint": c.Endpoint, "status": "ACTIVE", "version": "1.33",
			"createdAt": now, "certificateAuthority": map[string]any{"data": base64.StdEncoding.EncodeToString(c.CA)},
			"accessConfig":       map[string]any{"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": false},
			"resourcesVpcConfig": map[string]any{"endpointPrivateAccess": true, "endpointPublicAccess": c.PublicAccess, "publicAccessCidrs": cidrs},
		}})
	case "CreateAccessEntry":
		p := str("principalArn")
		call.Principal = p
		if !principalRe.MatchString(p) {
			return writeError(w, http.StatusBadRequest, "InvalidParameterException", "The specified principalArn is invalid: invalid ARN.")
		}
		if t := str("type"); t != "" && t != "STANDARD" {
			return writeError(w, http.StatusBadRequest, "InvalidParameterException", "only STANDARD entries are supported here")
		}
		if _, ok := entries[p]; ok {
			return writeError(w, http.StatusConflict, "ResourceInUseException", "The specified access entry resource is already in use on this cluster.")
		}
		e := &AccessEntry{PrincipalARN: p, Username: str("username"), Created: time.Now()}
		_ = json.Unmarshal(body["kubernetesGroups"], &e.Groups)
		_ = json.Unmarshal(body["tags"], &e.Tags)
		entries[p] = e
		writeJSON(w, map[string]any{"accessEntry": entryJSON(e)})
	case "ListAccessEntries":
		list := []string{}
		for p := range entries {
			list = append(list, p)
		}
		sort.Strings(list)
		writeJSON(w, map[string]any{"accessEntries": list})
	case "DescribeAccessEntry":
		e, ok := entries[call.Principal]
		if !ok {
			return writeError(w, http.StatusNotFound, "ResourceNotFoundException", "The specified access entry resource can't be found.")
		}
		writeJSON(w, map[string]any{"accessEntry": entryJSON(e)})
	case "DeleteAccessEntry":
		if _, ok := entries[call.Principal]; !ok {
			return writeError(w, http.StatusNotFound, "ResourceNotFoundException", "The specified access entry resource can't be found.")
		}
		delete(entries, call.Principal)
		writeJSON(w, map[string]any{})
	case "AssociateAccessPolicy":
		e, ok := entries[call.Principal]
		if !ok {
			return writeError(w, http.StatusNotFound, "ResourceNotFoundException", "The specified access entry resource can't be found.")
		}
		var scope struct {
			Type       string   `json:"type"`
			Namespaces []string `json:"namespaces"`
		}
		_ = json.Unmarshal(body["accessScope"], &scope)
		pa := str("policyArn")
		if !strings.HasPrefix(pa, "arn:aws:eks::aws:cluster-access-policy/") || (scope.Type != "cluster" && scope.Type != "namespace") ||
			(scope.Type == "namespace") != (len(scope.Namespaces) > 0) {
			return writeError(w, http.StatusBadRequest, "InvalidParameterException", "policyArn and accessScope are invalid")
		}
		p := Policy{ARN: pa, Scope: scope.Type, Namespaces: scope.Namespaces}
		e.Policies = slices.DeleteFunc(e.Policies, func(q Policy) bool { return q.ARN == pa })
		e.Policies = append(e.Policies, p)
		writeJSON(w, map[string]any{"clusterName": c.Name, "principalArn": e.PrincipalARN, "associatedAccessPolicy": map[string]any{
			"policyArn": pa, "accessScope": map[string]any{"type": p.Scope, "namespaces": p.Namespaces}, "associatedAt": now, "modifiedAt": now}})
	}
	return ""
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// writeError answers an EKS error.
func writeError(w http.ResponseWriter, status int, code, msg string) string {
	b, _ := json.Marshal(map[string]string{"__type": code, "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return code
}
