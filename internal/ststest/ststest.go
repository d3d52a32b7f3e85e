package ststest

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/internal/awstest"
)

// Namespace is the XML namespace of STS answers.
const Namespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// Role is a role callers may assume.
type Role struct {
	// ARN is the role's ARN, arn:aws:iam::ACCOUNT:role/NAME.
	ARN string
	// TrustedAccount is the only account whose principals may assume it.
	TrustedAccount string
	// ExternalID, when set, must be presented exactly.
	ExternalID string
}

// Call is one request the server answered.
type Call struct {
	Action, RoleARN, RoleSessionName, ExternalID string
	// Caller is the principal ARN of the access key that signed, or ""
	// when the key was unknown.
	Caller string
	// Code is the error code answered, "" on success.
	Code string
}

// Credentials are temporary credentials the server issued.
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	Expiration                                 time.Time
	// Arn is the assumed-role session they belong to,
	// arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION.
	Arn string
}

// Server is the stand-in.
type Server struct {
	// URL is the endpoint (plain HTTP on loopback).
	URL string

	now func() time.Time

	mu      sync.Mutex
	callers map[string]string // access key → principal ARN
	roles   map[string]Role
	calls   []Call
	issued  []Credentials
	byKey   map[string]Credentials // issued, by access key
}

// Option configures New.
type Option func(*Server)

// WithClock sets the clock the expirations come from; default time.Now.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New serves the stand-in until the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{now: time.Now, callers: map[string]string{}, roles: map[string]Role{}, byKey: map[string]Credentials{}}
	for _, o := range opts {
		o(s)
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// AddCaller makes an access key known as principal (an IAM ARN such as
// arn:aws:iam::111111111111:user/tenant).
func (s *Server) AddCaller(accessKeyID, principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callers[accessKeyID] = principal
}

// AddRole makes a role assumable.
func (s *Server) AddRole(r Role) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[r.ARN] = r
}

// Calls returns the calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Secret returns the secret and session token of credentials this server
// issued (ok false for any other access key): what another stand-in
// (internal/s3test's Keys) checks their signatures with.
func (s *Server) Secret(accessKeyID string) (secret, sessionToken string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byKey[accessKeyID]
	return c.SecretAccessKey, c.SessionToken, ok
}

// Issued returns the credentials handed out so far.
func (s *Server) Issued() []Credentials {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Credentials(nil), s.issued...)
}

var accountRe = regexp.MustCompile(`^arn:aws[a-z-]*:(?:iam|sts)::([0-9]{12}):`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Get("Action") == "GetCallerIdentity" {
		call := Call{Action: "GetCallerIdentity"}
		call.Code = s.presignedIdentity(w, r, &call)
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
		return
	}
	q := awstest.ParseQuery(w, r, Namespace)
	if q == nil {
		return
	}
	call := Call{Action: q.Action, RoleARN: q.Get("RoleArn"), RoleSessionName: q.Get("RoleSessionName"), ExternalID: q.Get("ExternalId")}
	code := s.answer(w, r, &call)
	call.Code = code
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

// answer writes the answer to one call and returns its error code.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, call *Call) string {
	key := awstest.AccessKey(r, "sts")
	if key == "" {
		return writeError(w, http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
	}
	s.mu.Lock()
	caller, known := s.callers[key]
	role, roleKnown := s.roles[call.RoleARN]
	s.mu.Unlock()
	if !known && call.Action == "GetCallerIdentity" {
		// Credentials this server issued know who they are too (as
		// Terraform's s3 backend asks before it touches the state).
		s.mu.Lock()
		c, issued := s.byKey[key]
		s.mu.Unlock()
		if issued && r.Header.Get("X-Amz-Security-Token") == c.SessionToken {
			call.Caller = c.Arn
			return writeIdentity(w, r, c.Arn)
		}
	}
	if !known {
		return writeError(w, http.StatusForbidden, "InvalidClientTokenId", "The security token included in the request is invalid.")
	}
	call.Caller = caller
	if call.Action == "GetCallerIdentity" {
		return writeIdentity(w, r, caller)
	}
	if call.Action != "AssumeRole" {
		return writeError(w, http.StatusBadRequest, "InvalidAction", "Could not find operation "+call.Action+" for version "+r.PostForm.Get("Version"))
	}
	if v := r.PostForm.Get("Version"); v != "2011-06-15" {
		return writeError(w, http.StatusBadRequest, "InvalidParameterValue", "unsupported Version "+v)
	}
	if call.RoleSessionName == "" || call.RoleARN == "" {
		return writeError(w, http.StatusBadRequest, "ValidationError", "RoleArn and RoleSessionName are required")
	}
	duration := 3600
	if d := r.PostForm.Get("DurationSeconds"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 900 || n > 43200 {
			return writeError(w, http.StatusBadRequest, "ValidationError", "DurationSeconds must be between 900 and 43200")
		}
		duration = n
	}
	// STS does not say which condition failed: a wrong account, a wrong
	// ExternalId, a missing one and an unknown role all read the same.
	denied := fmt.Sprintf("User: %s is not authorized to perform: sts:AssumeRole on resource: %s", caller, call.RoleARN)
	am := accountRe.FindStringSubmatch(caller)
	if !roleKnown || am == nil || am[1] != role.TrustedAccount || (role.ExternalID != "" && call.ExternalID != role.ExternalID) {
		return writeError(w, http.StatusForbidden, "AccessDenied", denied)
	}
	roleName := call.RoleARN[strings.LastIndex(call.RoleARN, "/")+1:]
	roleAccount := accountRe.FindStringSubmatch(call.RoleARN)
	acct := ""
	if roleAccount != nil {
		acct = roleAccount[1]
	}
	c := Credentials{
		AccessKeyID: "ASIA" + strings.ToUpper(random(8)), SecretAccessKey: random(20), SessionToken: random(64),
		Expiration: s.now().Add(time.Duration(duration) * time.Second).UTC().Truncate(time.Second),
		Arn:        fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", acct, roleName, call.RoleSessionName),
	}
	s.mu.Lock()
	s.issued = append(s.issued, c)
	s.byKey[c.AccessKeyID] = c
	s.mu.Unlock()
	resp := assumeRoleResponse{
		Xmlns: Namespace,
		Result: assumeRoleResult{
			User: assumedRoleUser{
				Arn:    c.Arn,
				RoleID: "AROA" + strings.ToUpper(random(8)) + ":" + call.RoleSessionName,
			},
			Credentials: xmlCredentials{c.AccessKeyID, c.SecretAccessKey, c.SessionToken, c.Expiration.Format(time.RFC3339)},
		},
		RequestID: random(16),
	}
	writeXML(w, http.StatusOK, resp)
	return ""
}

type assumeRoleResponse struct {
	XMLName   xml.Name         `xml:"AssumeRoleResponse"`
	Xmlns     string           `xml:"xmlns,attr"`
	Result    assumeRoleResult `xml:"AssumeRoleResult"`
	RequestID string           `xml:"ResponseMetadata>RequestId"`
}

type assumeRoleResult struct {
	User        assumedRoleUser `xml:"AssumedRoleUser"`
	Credentials xmlCredentials  `xml:"Credentials"`
}

type assumedRoleUser struct {
	Arn    string `xml:"Arn"`
	RoleID string `xml:"AssumedRoleId"`
}

type xmlCredentials struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) string {
	return awstest.WriteError(w, status, Namespace, code, msg)
}

func writeXML(w http.ResponseWriter, status int, v any) { awstest.WriteXML(w, status, v) }

func random(n int) string { return awstest.Random(n) }

// BlackHole returns the URL of an endpoint that accepts connections and
// never answers, until the test ends (awstest.BlackHole).
func BlackHole(t testing.TB) string {
	t.Helper()
	return awstest.BlackHole(t)
}
