// Package ecrtest is a loopback fake of Amazon ECR for tests: its
// control-plane API (GetAuthorizationToken, CreateRepository,
// DescribeRepositories by name or in pages, DeleteRepository, which
// refuses a repository holding images unless forced), speaking the JSON 1.1 protocol aws-sdk-go-v2 sends
// (POST /, X-Amz-Target: AmazonEC2ContainerRegistry_V20150921.<Op>,
// application/x-amz-json-1.1, errors as HTTP 400 {"__type", "message"},
// times in epoch seconds), and a registry endpoint in front of a real
// registry that, as ECR does, accepts only the tokens the API issued,
// refuses expired ones, and answers NAME_UNKNOWN for repositories that
// were not created through the API.
//
// Point the SDK at it with ecr.Options.BaseEndpoint (or
// AWS_ENDPOINT_URL_ECR) set to Server.Endpoint; the registry is
// Server.Host.
package ecrtest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"nuon.dev/nuon/internal/oci/ocitest"
)

// TargetPrefix is the X-Amz-Target prefix of ECR's API operations.
const TargetPrefix = "AmazonEC2ContainerRegistry_V20150921."

// Server is the fake.
type Server struct {
	// Endpoint is the API's URL (plain HTTP on loopback).
	Endpoint string
	// Host is the registry endpoint, 127.0.0.1:PORT, serving TLS with the
	// backend registry's certificate.
	Host string
	// AccountID and Region name the fake registry.
	AccountID, Region string

	backend  *ocitest.Registry
	lifetime time.Duration
	now      func() time.Time

	mu      sync.Mutex
	tokens  map[string]time.Time // token → expiry
	repos   map[string]time.Time // repository → creation
	calls   map[string]int
	signers map[string]map[string]bool // operation → access keys
	expired int
}

// Option configures New.
type Option func(*Server)

// WithTokenLifetime sets how long issued tokens last; default 12 hours,
// as ECR's do.
func WithTokenLifetime(d time.Duration) Option { return func(s *Server) { s.lifetime = d } }

// WithClock sets the clock; default time.Now.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New serves the fake in front of backend, a registry with TLS and basic
// auth, until the test ends.
func New(t testing.TB, backend *ocitest.Registry, opts ...Option) *Server {
	t.Helper()
	if backend.CertFile == "" {
		t.Fatal("ecrtest: the backend registry must serve TLS")
	}
	s := &Server{
		AccountID: "111111111111", Region: "us-east-1",
		backend: backend, lifetime: 12 * time.Hour, now: time.Now,
		tokens: map[string]time.Time{}, repos: map[string]time.Time{}, calls: map[string]int{},
		signers: map[string]map[string]bool{},
	}
	for _, o := range opts {
		o(s)
	}
	api := httptest.NewServer(http.HandlerFunc(s.serveAPI))
	t.Cleanup(api.Close)
	s.Endpoint = api.URL

	cert, err := tls.LoadX509KeyPair(backend.CertFile, backend.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewUnstartedServer(s.registryHandler())
	reg.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	reg.StartTLS()
	t.Cleanup(reg.Close)
	s.Host = strings.TrimPrefix(reg.URL, "https://")
	return s
}

// Calls returns how often each API operation was called.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// Signers returns the access keys that signed calls of operation op,
// sorted.
func (s *Server) Signers(op string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.signers[op]))
}

// PutImage pushes a small random image as repository:tag straight into
// the backend registry: an image the agent pushed. The repository must
// have been created through the API for the registry endpoint to serve it.
func (s *Server) PutImage(t testing.TB, repository, tag string) {
	t.Helper()
	ref, err := name.ParseReference(s.backend.Host + "/" + repository + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(s.backend.Auth()), remote.WithTransport(s.backendTransport())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func (s *Server) backendTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: s.backend.RootCAs()}
	return tr
}

// images counts the tags of a repository in the backend.
func (s *Server) images(repository string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, s.backend.URL()+"/v2/"+repository+"/tags/list", nil)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth(s.backend.Username, s.backend.Password)
	resp, err := (&http.Client{Transport: s.backendTransport(), Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0, nil
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("tags of %s: %s", repository, resp.Status)
	}
	var list struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	return len(list.Tags), nil
}

// Expired counts registry requests refused because their token had
// expired.
func (s *Server) Expired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expired
}

// Repositories lists the repositories created through the API.
func (s *Server) Repositories() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for r := range s.repos {
		out = append(out, r)
	}
	return out
}

// apiError is an error answer of the JSON 1.1 protocol.
type apiError struct {
	Type    string `json:"__type"`
	Message string `json:"message"`
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	op, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/":
		writeJSON(w, http.StatusNotFound, apiError{"UnknownOperationException", "POST / only"})
		return
	case !ok:
		writeJSON(w, http.StatusBadRequest, apiError{"UnknownOperationException", "missing or foreign X-Amz-Target"})
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.1"):
		writeJSON(w, http.StatusBadRequest, apiError{"SerializationException", "content type must be application/x-amz-json-1.1"})
		return
	case !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="):
		writeJSON(w, http.StatusBadRequest, apiError{"MissingAuthenticationTokenException", "Missing Authentication Token"})
		return
	}
	key, _, _ := strings.Cut(strings.TrimPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential="), "/")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"SerializationException", err.Error()})
		return
	}
	s.mu.Lock()
	s.calls[op]++
	if s.signers[op] == nil {
		s.signers[op] = map[string]bool{}
	}
	s.signers[op][key] = true
	s.mu.Unlock()
	switch op {
	case "GetAuthorizationToken":
		s.getAuthorizationToken(w)
	case "CreateRepository":
		s.createRepository(w, body)
	case "DescribeRepositories":
		s.describeRepositories(w, body)
	case "DeleteRepository":
		s.deleteRepository(w, body)
	default:
		writeJSON(w, http.StatusBadRequest, apiError{"UnknownOperationException", "unsupported operation " + op})
	}
}

func (s *Server) getAuthorizationToken(w http.ResponseWriter) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	expires := s.now().Add(s.lifetime)
	s.mu.Lock()
	s.tokens[token] = expires
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"authorizationData": []map[string]any{{
			"authorizationToken": base64.StdEncoding.EncodeToString([]byte("AWS:" + token)),
			"expiresAt":          epoch(expires),
			"proxyEndpoint":      "https://" + s.Host,
		}},
	})
}

// repoName is the pattern ECR allows for repository names.
var repoName = regexp.MustCompile(`^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$`)

func (s *Server) createRepository(w http.ResponseWriter, body []byte) {
	var in struct {
		RepositoryName     string `json:"repositoryName"`
		RegistryID         string `json:"registryId"`
		ImageTagMutability string `json:"imageTagMutability"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"SerializationException", err.Error()})
		return
	}
	if len(in.RepositoryName) < 2 || len(in.RepositoryName) > 256 || !repoName.MatchString(in.RepositoryName) {
		writeJSON(w, http.StatusBadRequest, apiError{"InvalidParameterException", fmt.Sprintf("Invalid parameter at 'repositoryName' failed to satisfy constraint: %q", in.RepositoryName)})
		return
	}
	if in.RegistryID != "" && in.RegistryID != s.AccountID {
		writeJSON(w, http.StatusBadRequest, apiError{"InvalidParameterException", "registry " + in.RegistryID + " is not this account's"})
		return
	}
	s.mu.Lock()
	_, exists := s.repos[in.RepositoryName]
	if !exists {
		s.repos[in.RepositoryName] = s.now()
	}
	created := s.repos[in.RepositoryName]
	s.mu.Unlock()
	if exists {
		writeJSON(w, http.StatusBadRequest, apiError{"RepositoryAlreadyExistsException",
			fmt.Sprintf("The repository with name '%s' already exists in the registry with id '%s'", in.RepositoryName, s.AccountID)})
		return
	}
	mut := in.ImageTagMutability
	if mut == "" {
		mut = "MUTABLE"
	}
	writeJSON(w, http.StatusOK, map[string]any{"repository": s.repository(in.RepositoryName, created, mut)})
}

func (s *Server) repository(name string, created time.Time, mutability string) map[string]any {
	return map[string]any{
		"repositoryArn":      fmt.Sprintf("arn:aws:ecr:%s:%s:repository/%s", s.Region, s.AccountID, name),
		"registryId":         s.AccountID,
		"repositoryName":     name,
		"repositoryUri":      s.Host + "/" + name,
		"createdAt":          epoch(created),
		"imageTagMutability": mutability,
	}
}

// describeRepositories describes the repositories named, or, with no
// names, every repository in pages of maxResults (1-1000, default 100)
// with a nextToken, as ECR does.
func (s *Server) describeRepositories(w http.ResponseWriter, body []byte) {
	var in struct {
		RepositoryNames []string `json:"repositoryNames"`
		MaxResults      *int     `json:"maxResults"`
		NextToken       string   `json:"nextToken"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"SerializationException", err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	repos := []map[string]any{}
	if len(in.RepositoryNames) == 0 {
		size := 100
		if in.MaxResults != nil {
			size = *in.MaxResults
		}
		if size < 1 || size > 1000 {
			writeJSON(w, http.StatusBadRequest, apiError{"InvalidParameterException", "maxResults must be between 1 and 1000"})
			return
		}
		names := slices.Sorted(maps.Keys(s.repos))
		start := 0
		if in.NextToken != "" {
			// The token is the last name of the previous page.
			start, _ = slices.BinarySearch(names, in.NextToken)
			if start < len(names) && names[start] == in.NextToken {
				start++
			}
		}
		end := min(start+size, len(names))
		for _, n := range names[start:end] {
			repos = append(repos, s.repository(n, s.repos[n], "MUTABLE"))
		}
		out := map[string]any{"repositories": repos}
		if end < len(names) {
			out["nextToken"] = names[end-1]
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if in.MaxResults != nil || in.NextToken != "" {
		writeJSON(w, http.StatusBadRequest, apiError{"InvalidParameterException", "maxResults and nextToken cannot be used with repositoryNames"})
		return
	}
	for _, n := range in.RepositoryNames {
		created, ok := s.repos[n]
		if !ok {
			writeJSON(w, http.StatusBadRequest, apiError{"RepositoryNotFoundException",
				fmt.Sprintf("The repository with name '%s' does not exist in the registry with id '%s'", n, s.AccountID)})
			return
		}
		repos = append(repos, s.repository(n, created, "MUTABLE"))
	}
	writeJSON(w, http.StatusOK, map[string]any{"repositories": repos})
}

// deleteRepository deletes a repository; one that holds images only with
// force, as ECR does.
func (s *Server) deleteRepository(w http.ResponseWriter, body []byte) {
	var in struct {
		RepositoryName string `json:"repositoryName"`
		RegistryID     string `json:"registryId"`
		Force          bool   `json:"force"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{"SerializationException", err.Error()})
		return
	}
	if in.RegistryID != "" && in.RegistryID != s.AccountID {
		writeJSON(w, http.StatusBadRequest, apiError{"InvalidParameterException", "registry " + in.RegistryID + " is not this account's"})
		return
	}
	s.mu.Lock()
	created, ok := s.repos[in.RepositoryName]
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusBadRequest, apiError{"RepositoryNotFoundException",
			fmt.Sprintf("The repository with name '%s' does not exist in the registry with id '%s'", in.RepositoryName, s.AccountID)})
		return
	}
	if !in.Force {
		n, err := s.images(in.RepositoryName)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, apiError{"ServerException", err.Error()})
			return
		}
		if n > 0 {
			writeJSON(w, http.StatusBadRequest, apiError{"RepositoryNotEmptyException",
				fmt.Sprintf("The repository with name '%s' in registry with id '%s' cannot be deleted because it still contains images", in.RepositoryName, s.AccountID)})
			return
		}
	}
	s.mu.Lock()
	delete(s.repos, in.RepositoryName)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"repository": s.repository(in.RepositoryName, created, "MUTABLE")})
}

func epoch(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	var b [8]byte
	_, _ = rand.Read(b[:])
	w.Header().Set("X-Amzn-Requestid", hex.EncodeToString(b[:]))
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// registryHandler checks credentials and repositories as ECR does and
// passes what it accepts to the backend with the backend's credentials.
func (s *Server) registryHandler() http.Handler {
	backend, _ := url.Parse(s.backend.URL())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: s.backend.RootCAs()}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(backend)
			pr.Out.Host = pr.In.Host // the backend writes Location URLs for the host asked
			pr.Out.SetBasicAuth(s.backend.Username, s.backend.Password)
		},
		Transport: tr,
		ModifyResponse: func(resp *http.Response) error {
			if loc := resp.Header.Get("Location"); loc != "" {
				resp.Header.Set("Location", strings.Replace(loc, backend.Host, s.Host, 1))
			}
			return nil
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v2/") {
			http.NotFound(w, r)
			return
		}
		if code, msg := s.authorize(r); code != 0 {
			if code == http.StatusForbidden {
				s.mu.Lock()
				s.expired++
				s.mu.Unlock()
			}
			w.Header().Set("Www-Authenticate", fmt.Sprintf(`Basic realm="https://%s/",service="ecr.amazonaws.com"`, s.Host))
			registryError(w, code, "DENIED", msg)
			return
		}
		if r.URL.Path != "/v2/" {
			name := repository(r.URL.Path)
			s.mu.Lock()
			_, ok := s.repos[name]
			s.mu.Unlock()
			if !ok {
				registryError(w, http.StatusNotFound, "NAME_UNKNOWN",
					fmt.Sprintf("The repository with name '%s' does not exist in the registry with id '%s'", name, s.AccountID))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
}

// authorize checks basic credentials AWS:<token>; it returns the status
// to refuse with, or 0.
func (s *Server) authorize(r *http.Request) (int, string) {
	user, token, ok := r.BasicAuth()
	if !ok || user != "AWS" {
		return http.StatusUnauthorized, "Not Authorized"
	}
	s.mu.Lock()
	expires, known := s.tokens[token]
	s.mu.Unlock()
	switch {
	case !known:
		return http.StatusUnauthorized, "Not Authorized"
	case !s.now().Before(expires):
		return http.StatusForbidden, "Your authorization token has expired. Reauthenticate and try again."
	}
	return 0, ""
}

// repository is the repository name of a registry API path.
func repository(p string) string {
	rest := strings.TrimPrefix(p, "/v2/")
	for _, sep := range []string{"/manifests/", "/blobs/", "/tags/", "/referrers/"} {
		if i := strings.LastIndex(rest, sep); i >= 0 {
			return rest[:i]
		}
	}
	return strings.TrimSuffix(rest, "/")
}

func registryError(w http.ResponseWriter, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": kind, "message": msg}}})
}
