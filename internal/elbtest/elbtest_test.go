package elbtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/elbtest"
)

func config(s *elbtest.Server) aws.Config {
	return aws.Config{Region: s.Region, Credentials: credentials.NewStaticCredentialsProvider("AKIAEXAMPLE", "secret", "")}
}

// TestSDK drives the stand-in with aws-sdk-go-v2's two ELB clients, as
// `nuon install delete` does: pages of load balancers, their tags, and
// the SDK's typed errors.
func TestSDK(t *testing.T) {
	ctx := context.Background()
	s := elbtest.New(t, elbtest.WithPageSize(2))
	for _, lb := range []elbtest.LoadBalancer{
		{Name: "k8s-shop-api", Type: elbtest.Application, VPC: "vpc-1", Tags: map[string]string{"elbv2.k8s.aws/cluster": "nuon-acme", "ingress.k8s.aws/stack": "shop/api"}},
		{Name: "k8s-shop-tcp", Type: elbtest.Network, VPC: "vpc-1", Tags: map[string]string{"elbv2.k8s.aws/cluster": "nuon-acme"}},
		{Name: "other", Type: elbtest.Application, VPC: "vpc-2"},
		{Name: "a1b2c3", Type: elbtest.Classic, VPC: "vpc-1", Tags: map[string]string{"kubernetes.io/cluster/nuon-acme": "owned"}},
	} {
		s.Add(lb)
	}
	cfg := config(s)

	v2 := elbv2.NewFromConfig(cfg, func(o *elbv2.Options) { o.BaseEndpoint = aws.String(s.URL) })
	var names, vpcs []string
	var arns []string
	pages := elbv2.NewDescribeLoadBalancersPaginator(v2, &elbv2.DescribeLoadBalancersInput{})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, lb := range out.LoadBalancers {
			names = append(names, aws.ToString(lb.LoadBalancerName)+"/"+string(lb.Type))
			vpcs = append(vpcs, aws.ToString(lb.VpcId))
			arns = append(arns, aws.ToString(lb.LoadBalancerArn))
		}
	}
	if d := cmp.Diff([]string{"k8s-shop-api/application", "k8s-shop-tcp/network", "other/application"}, names); d != "" {
		t.Errorf("v2 load balancers (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"vpc-1", "vpc-1", "vpc-2"}, vpcs); d != "" {
		t.Errorf("v2 VPCs (-want +got):\n%s", d)
	}
	tags, err := v2.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: arns[:2]})
	if err != nil {
		t.Fatal(err)
	}
	if len(tags.TagDescriptions) != 2 || aws.ToString(tags.TagDescriptions[0].ResourceArn) != arns[0] ||
		len(tags.TagDescriptions[0].Tags) != 2 || aws.ToString(tags.TagDescriptions[0].Tags[0].Key) != "elbv2.k8s.aws/cluster" {
		t.Errorf("v2 tags %+v", tags.TagDescriptions)
	}
	_, err = v2.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: []string{arns[0] + "x"}})
	if _, ok := errors.AsType[*elbv2types.LoadBalancerNotFoundException](err); !ok {
		t.Errorf("tags of an unknown ARN: %v, want LoadBalancerNotFoundException", err)
	}
	_, err = v2.DeleteLoadBalancer(ctx, &elbv2.DeleteLoadBalancerInput{LoadBalancerArn: aws.String(arns[0])})
	if ae, ok := errors.AsType[smithy.APIError](err); !ok || ae.ErrorCode() != "InvalidAction" {
		t.Errorf("DeleteLoadBalancer: %v, want InvalidAction", err)
	}

	classic := elb.NewFromConfig(cfg, func(o *elb.Options) { o.BaseEndpoint = aws.String(s.URL) })
	out, err := classic.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.LoadBalancerDescriptions) != 1 || aws.ToString(out.LoadBalancerDescriptions[0].LoadBalancerName) != "a1b2c3" ||
		aws.ToString(out.LoadBalancerDescriptions[0].VPCId) != "vpc-1" {
		t.Errorf("classic load balancers %+v", out.LoadBalancerDescriptions)
	}
	ct, err := classic.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: []string{"a1b2c3"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ct.TagDescriptions) != 1 || aws.ToString(ct.TagDescriptions[0].Tags[0].Key) != "kubernetes.io/cluster/nuon-acme" {
		t.Errorf("classic tags %+v", ct.TagDescriptions)
	}
	_, err = classic.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: []string{"gone"}})
	if _, ok := errors.AsType[*elbtypes.AccessPointNotFoundException](err); !ok {
		t.Errorf("classic tags of an unknown name: %v, want AccessPointNotFoundException", err)
	}

	s.Remove("k8s-shop-api")
	again, err := v2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{PageSize: aws.Int32(10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.LoadBalancers) != 2 || again.NextMarker != nil {
		t.Errorf("after Remove: %d load balancers, next marker %v", len(again.LoadBalancers), again.NextMarker)
	}
	for _, c := range s.Calls() {
		if c.AccessKeyID != "AKIAEXAMPLE" {
			t.Errorf("call %+v: want the signing key recorded", c)
		}
	}
}
