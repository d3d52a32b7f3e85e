// Package elbtest is a loopback stand-in for Elastic Load Balancing for
// tests: the read side that `nuon install delete` uses to find load
// balancers Kubernetes controllers made, in both APIs AWS serves at the
// one endpoint elasticloadbalancing.<region>.amazonaws.com and tells apart
// by Version:
//
//   - ELBv2 (2015-12-01; application, network and gateway load
//     balancers, which the AWS Load Balancer Controller makes and tags
//     elbv2.k8s.aws/cluster=<cluster>): DescribeLoadBalancers (PageSize,
//     Marker) and DescribeTags (ResourceArns, at most 20);
//   - the classic API (2012-06-01; what the in-tree cloud provider makes
//     for a Service of type LoadBalancer, tagged
//     kubernetes.io/cluster/<cluster>=owned): DescribeLoadBalancers and
//     DescribeTags (LoadBalancerNames, at most 20).
//
// It speaks the query protocol (internal/awstest): a form POST signed with
// SigV4 for the service elasticloadbalancing, XML answers, and XML
// ErrorResponses (LoadBalancerNotFound, ValidationError, InvalidAction,
// MissingAuthenticationToken) that the SDK turns into its typed errors.
// Every call is recorded with the access key that signed it. Other
// actions, deletions among them, are refused: nothing here deletes a load
// balancer behind its controller's back.
//
// Point the SDK at it with elasticloadbalancingv2.Options.BaseEndpoint and
// elasticloadbalancing.Options.BaseEndpoint (or AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING
// and _V2) set to Server.URL.
package elbtest

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"nuon.dev/nuon/internal/awstest"
)

// Versions and namespaces of the two APIs.
const (
	V2Version        = "2015-12-01"
	ClassicVersion   = "2012-06-01"
	V2Namespace      = "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"
	ClassicNamespace = "http://elasticloadbalancing.amazonaws.com/doc/2012-06-01/"
)

// Types of load balancers.
const (
	Application = "application"
	Network     = "network"
	Gateway     = "gateway"
	Classic     = "classic"
)

// LoadBalancer is one load balancer the server knows.
type LoadBalancer struct {
	// Name is unique per API.
	Name string
	// Type is Application, Network, Gateway (ELBv2) or Classic.
	Type string
	// VPC is the id of its VPC.
	VPC string
	// Tags are its tags.
	Tags map[string]string
}

// Call is one request the server answered.
type Call struct {
	// Action and Version as sent.
	Action, Version string
	// AccessKeyID signed the request ("" when unsigned).
	AccessKeyID string
	// Code is the error code answered, "" on success.
	Code string
}

// Server is the stand-in.
type Server struct {
	// URL is the endpoint (plain HTTP on loopback).
	URL string
	// Region and AccountID go into ARNs and DNS names.
	Region, AccountID string

	pageSize int
	created  time.Time

	mu    sync.Mutex
	lbs   []LoadBalancer // in the order added
	calls []Call
}

// Option configures New.
type Option func(*Server)

// WithPageSize sets the page size used when a request names none; default
// 400, ELB's largest.
func WithPageSize(n int) Option { return func(s *Server) { s.pageSize = n } }

// New serves the stand-in until the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{Region: "eu-west-1", AccountID: "222222222222", pageSize: 400, created: time.Now().UTC().Truncate(time.Second)}
	for _, o := range opts {
		o(s)
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Add adds (or replaces, by name and API) a load balancer.
func (s *Server) Add(lb LoadBalancer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lbs = slices.DeleteFunc(s.lbs, func(o LoadBalancer) bool { return o.Name == lb.Name && (o.Type == Classic) == (lb.Type == Classic) })
	s.lbs = append(s.lbs, lb)
}

// Remove removes the load balancers named name, as their controller does
// once their Service or Ingress is gone.
func (s *Server) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lbs = slices.DeleteFunc(s.lbs, func(o LoadBalancer) bool { return o.Name == name })
}

// Calls returns the calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// ARN is the ARN of an ELBv2 load balancer, as DescribeLoadBalancers
// gives it.
func (s *Server) ARN(lb LoadBalancer) string {
	kind := map[string]string{Application: "app", Network: "net", Gateway: "gwy"}[lb.Type]
	return fmt.Sprintf("arn:aws:elasticloadbalancing:%s:%s:loadbalancer/%s/%s/%s", s.Region, s.AccountID, kind, lb.Name, id(lb.Name))
}

// id is a stable 16-hex-digit id for a name.
func id(name string) string {
	var h uint64 = 1469598103934665603
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return fmt.Sprintf("%016x", h)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	q := awstest.ParseQuery(w, r, V2Namespace)
	if q == nil {
		return
	}
	call := Call{Action: q.Action, Version: q.Version, AccessKeyID: awstest.AccessKey(r, "elasticloadbalancing")}
	call.Code = s.answer(w, q, call.AccessKeyID)
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

func (s *Server) answer(w http.ResponseWriter, q *awstest.Query, key string) string {
	a, known := apis[q.Version]
	ns := V2Namespace
	if known {
		ns = a.ns
	}
	if key == "" {
		return awstest.WriteError(w, http.StatusForbidden, ns, "MissingAuthenticationToken", "Request is missing Authentication Token")
	}
	if !known {
		return awstest.WriteError(w, http.StatusBadRequest, ns, "InvalidParameterValue", "unsupported Version "+q.Version)
	}
	switch q.Action {
	case "DescribeLoadBalancers":
		return s.describe(w, q, a)
	case "DescribeTags":
		return s.tags(w, q, a)
	}
	return awstest.WriteError(w, http.StatusBadRequest, ns, "InvalidAction", "Could not find operation "+q.Action+" for version "+q.Version)
}

// api is what one of the two APIs calls things on the wire; describe and
// tags answer both from it.
type api struct {
	ns      string
	classic bool // its load balancers are the Classic ones
	// names is DescribeLoadBalancers' filter by name. tagged is
	// DescribeTags' list of load balancers, each named as key names it.
	names, tagged string
	key           func(s *Server, lb LoadBalancer) string
	// notFound is the LoadBalancerNotFound message for name, unknown in
	// action's list.
	notFound func(action, name string) string
	// result is DescribeLoadBalancersResult: lbs, and the next marker.
	result func(s *Server, lbs []LoadBalancer, next string) any
	// tagDescription is one member of DescribeTagsResult's
	// TagDescriptions.
	tagDescription func(key string, tags member[tag]) any
}

// apis are the two APIs by Version.
var apis = map[string]api{
	V2Version: {
		ns: V2Namespace, names: "Names", tagged: "ResourceArns", key: (*Server).ARN,
		notFound: func(action, arn string) string {
			if action == "DescribeTags" {
				return "Load balancer '" + arn + "' not found"
			}
			return "One or more load balancers not found"
		},
		result:         (*Server).resultV2,
		tagDescription: func(arn string, tags member[tag]) any { return tagDescriptionV2{arn, tags} },
	},
	ClassicVersion: {
		ns: ClassicNamespace, classic: true, names: "LoadBalancerNames", tagged: "LoadBalancerNames", key: byName,
		notFound:       func(_, name string) string { return "There is no ACTIVE Load Balancer named '" + name + "'" },
		result:         (*Server).resultClassic,
		tagDescription: func(name string, tags member[tag]) any { return tagDescriptionClassic{name, tags} },
	},
}

func byName(_ *Server, lb LoadBalancer) string { return lb.Name }

// page returns the slice of lbs a PageSize and Marker select, and the
// next marker ("" on the last page).
func (s *Server) page(w http.ResponseWriter, q *awstest.Query, ns string, lbs []LoadBalancer) ([]LoadBalancer, string, string) {
	size := s.pageSize
	if v := q.Get("PageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 400 {
			return nil, "", awstest.WriteError(w, http.StatusBadRequest, ns, "ValidationError", "PageSize must be between 1 and 400")
		}
		size = n
	}
	start := 0
	if m := q.Get("Marker"); m != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "m"))
		if err != nil || !strings.HasPrefix(m, "m") || n < 0 || n > len(lbs) {
			return nil, "", awstest.WriteError(w, http.StatusBadRequest, ns, "ValidationError", "Invalid Marker")
		}
		start = n
	}
	end := min(start+size, len(lbs))
	next := ""
	if end < len(lbs) {
		next = "m" + strconv.Itoa(end)
	}
	return lbs[start:end], next, ""
}

// snapshot returns the load balancers of one API.
func (s *Server) snapshot(classic bool) []LoadBalancer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LoadBalancer
	for _, lb := range s.lbs {
		if (lb.Type == Classic) == classic {
			out = append(out, lb)
		}
	}
	return out
}

type member[T any] struct {
	Members []T `xml:"member"`
}

type tag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

func tags(m map[string]string) member[tag] {
	var out member[tag]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out.Members = append(out.Members, tag{k, m[k]})
	}
	return out
}

func (s *Server) dnsName(lb LoadBalancer) string {
	return fmt.Sprintf("%s-%s.%s.elb.amazonaws.com", lb.Name, id(lb.Name)[:10], s.Region)
}

// find returns the load balancers of all that keys name, in that order,
// each named as key names it; the first name it does not find is
// answered LoadBalancerNotFound.
func (s *Server) find(w http.ResponseWriter, a api, action string, all []LoadBalancer, keys []string, key func(*Server, LoadBalancer) string) ([]LoadBalancer, string) {
	var out []LoadBalancer
	for _, k := range keys {
		i := slices.IndexFunc(all, func(lb LoadBalancer) bool { return key(s, lb) == k })
		if i < 0 {
			return nil, awstest.WriteError(w, http.StatusBadRequest, a.ns, "LoadBalancerNotFound", a.notFound(action, k))
		}
		out = append(out, all[i])
	}
	return out, ""
}

// describe answers DescribeLoadBalancers: the API's load balancers, or
// those its name filter lists, a page of them.
func (s *Server) describe(w http.ResponseWriter, q *awstest.Query, a api) string {
	all := s.snapshot(a.classic)
	if names := q.List(a.names); len(names) > 0 {
		var code string
		if all, code = s.find(w, a, "DescribeLoadBalancers", all, names, byName); code != "" {
			return code
		}
	}
	lbs, next, code := s.page(w, q, a.ns, all)
	if code != "" {
		return code
	}
	awstest.WriteResult(w, a.ns, "DescribeLoadBalancers", a.result(s, lbs, next))
	return ""
}

// tags answers DescribeTags: the tags of 1 to 20 load balancers.
func (s *Server) tags(w http.ResponseWriter, q *awstest.Query, a api) string {
	keys := q.List(a.tagged)
	if len(keys) == 0 || len(keys) > 20 {
		return awstest.WriteError(w, http.StatusBadRequest, a.ns, "ValidationError", fmt.Sprintf("%s: %d given, want 1 to 20", a.tagged, len(keys)))
	}
	lbs, code := s.find(w, a, "DescribeTags", s.snapshot(a.classic), keys, a.key)
	if code != "" {
		return code
	}
	var out struct {
		TagDescriptions member[any] `xml:"TagDescriptions"`
	}
	for i, lb := range lbs {
		out.TagDescriptions.Members = append(out.TagDescriptions.Members, a.tagDescription(keys[i], tags(lb.Tags)))
	}
	awstest.WriteResult(w, a.ns, "DescribeTags", out)
	return ""
}

func (s *Server) resultV2(lbs []LoadBalancer, next string) any {
	type state struct {
		Code string `xml:"Code"`
	}
	type lbV2 struct {
		LoadBalancerArn  string `xml:"LoadBalancerArn"`
		DNSName          string `xml:"DNSName"`
		LoadBalancerName string `xml:"LoadBalancerName"`
		Scheme           string `xml:"Scheme"`
		VpcID            string `xml:"VpcId"`
		Type             string `xml:"Type"`
		State            state  `xml:"State"`
		CreatedTime      string `xml:"CreatedTime"`
	}
	var out struct {
		LoadBalancers member[lbV2] `xml:"LoadBalancers"`
		NextMarker    string       `xml:"NextMarker,omitempty"`
	}
	out.NextMarker = next
	for _, lb := range lbs {
		out.LoadBalancers.Members = append(out.LoadBalancers.Members, lbV2{
			LoadBalancerArn: s.ARN(lb), DNSName: s.dnsName(lb), LoadBalancerName: lb.Name, Scheme: "internet-facing",
			VpcID: lb.VPC, Type: lb.Type, State: state{"active"}, CreatedTime: s.created.Format(time.RFC3339),
		})
	}
	return out
}

func (s *Server) resultClassic(lbs []LoadBalancer, next string) any {
	type lbClassic struct {
		LoadBalancerName string `xml:"LoadBalancerName"`
		DNSName          string `xml:"DNSName"`
		VPCId            string `xml:"VPCId"`
		Scheme           string `xml:"Scheme"`
		CreatedTime      string `xml:"CreatedTime"`
	}
	var out struct {
		LoadBalancerDescriptions member[lbClassic] `xml:"LoadBalancerDescriptions"`
		NextMarker               string            `xml:"NextMarker,omitempty"`
	}
	out.NextMarker = next
	for _, lb := range lbs {
		out.LoadBalancerDescriptions.Members = append(out.LoadBalancerDescriptions.Members, lbClassic{
			LoadBalancerName: lb.Name, DNSName: s.dnsName(lb), VPCId: lb.VPC, Scheme: "internet-facing", CreatedTime: s.created.Format(time.RFC3339),
		})
	}
	return out
}

type tagDescriptionV2 struct {
	ResourceArn string      `xml:"ResourceArn"`
	Tags        member[tag] `xml:"Tags"`
}

type tagDescriptionClassic struct {
	LoadBalancerName string      `xml:"LoadBalancerName"`
	Tags             member[tag] `xml:"Tags"`
}
