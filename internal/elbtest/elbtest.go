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
	ns := V2Namespace
	if q.Version == ClassicVersion {
		ns = ClassicNamespace
	}
	if key == "" {
		return awstest.WriteError(w, http.StatusForbidden, ns, "MissingAuthenticationToken", "Request is missing Authentication Token")
	}
	switch {
	case q.Version == V2Version && q.Action == "DescribeLoadBalancers":
		return s.describeV2(w, q)
	case q.Version == V2Version && q.Action == "DescribeTags":
		return s.tagsV2(w, q)
	case q.Version == ClassicVersion && q.Action == "DescribeLoadBalancers":
		return s.describeClassic(w, q)
	case q.Version == ClassicVersion && q.Action == "DescribeTags":
		return s.tagsClassic(w, q)
	case q.Version != V2Version && q.Version != ClassicVersion:
		return awstest.WriteError(w, http.StatusBadRequest, ns, "InvalidParameterValue", "unsupported Version "+q.Version)
	}
	return awstest.WriteError(w, http.StatusBadRequest, ns, "InvalidAction", "Could not find operation "+q.Action+" for version "+q.Version)
}

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

func (s *Server) describeV2(w http.ResponseWriter, q *awstest.Query) string {
	all := s.snapshot(false)
	if names := q.List("Names"); len(names) > 0 {
		var sel []LoadBalancer
		for _, n := range names {
			i := slices.IndexFunc(all, func(lb LoadBalancer) bool { return lb.Name == n })
			if i < 0 {
				return awstest.WriteError(w, http.StatusBadRequest, V2Namespace, "LoadBalancerNotFound", "One or more load balancers not found")
			}
			sel = append(sel, all[i])
		}
		all = sel
	}
	lbs, next, code := s.page(w, q, V2Namespace, all)
	if code != "" {
		return code
	}
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
	awstest.WriteResult(w, V2Namespace, "DescribeLoadBalancers", out)
	return ""
}

func (s *Server) tagsV2(w http.ResponseWriter, q *awstest.Query) string {
	arns := q.List("ResourceArns")
	if len(arns) == 0 || len(arns) > 20 {
		return awstest.WriteError(w, http.StatusBadRequest, V2Namespace, "ValidationError", fmt.Sprintf("ResourceArns: %d given, want 1 to 20", len(arns)))
	}
	all := s.snapshot(false)
	type desc struct {
		ResourceArn string      `xml:"ResourceArn"`
		Tags        member[tag] `xml:"Tags"`
	}
	var out struct {
		TagDescriptions member[desc] `xml:"TagDescriptions"`
	}
	for _, arn := range arns {
		i := slices.IndexFunc(all, func(lb LoadBalancer) bool { return s.ARN(lb) == arn })
		if i < 0 {
			return awstest.WriteError(w, http.StatusBadRequest, V2Namespace, "LoadBalancerNotFound", "Load balancer '"+arn+"' not found")
		}
		out.TagDescriptions.Members = append(out.TagDescriptions.Members, desc{arn, tags(all[i].Tags)})
	}
	awstest.WriteResult(w, V2Namespace, "DescribeTags", out)
	return ""
}

func (s *Server) describeClassic(w http.ResponseWriter, q *awstest.Query) string {
	all := s.snapshot(true)
	if names := q.List("LoadBalancerNames"); len(names) > 0 {
		var sel []LoadBalancer
		for _, n := range names {
			i := slices.IndexFunc(all, func(lb LoadBalancer) bool { return lb.Name == n })
			if i < 0 {
				return awstest.WriteError(w, http.StatusBadRequest, ClassicNamespace, "LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '"+n+"'")
			}
			sel = append(sel, all[i])
		}
		all = sel
	}
	lbs, next, code := s.page(w, q, ClassicNamespace, all)
	if code != "" {
		return code
	}
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
	awstest.WriteResult(w, ClassicNamespace, "DescribeLoadBalancers", out)
	return ""
}

func (s *Server) tagsClassic(w http.ResponseWriter, q *awstest.Query) string {
	names := q.List("LoadBalancerNames")
	if len(names) == 0 || len(names) > 20 {
		return awstest.WriteError(w, http.StatusBadRequest, ClassicNamespace, "ValidationError", fmt.Sprintf("LoadBalancerNames: %d given, want 1 to 20", len(names)))
	}
	all := s.snapshot(true)
	type desc struct {
		LoadBalancerName string      `xml:"LoadBalancerName"`
		Tags             member[tag] `xml:"Tags"`
	}
	var out struct {
		TagDescriptions member[desc] `xml:"TagDescriptions"`
	}
	for _, n := range names {
		i := slices.IndexFunc(all, func(lb LoadBalancer) bool { return lb.Name == n })
		if i < 0 {
			return awstest.WriteError(w, http.StatusBadRequest, ClassicNamespace, "LoadBalancerNotFound", "There is no ACTIVE Load Balancer named '"+n+"'")
		}
		out.TagDescriptions.Members = append(out.TagDescriptions.Members, desc{n, tags(all[i].Tags)})
	}
	awstest.WriteResult(w, ClassicNamespace, "DescribeTags", out)
	return ""
}
