package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	ecrtypes "github.com/aws/aws-sdk-go-v2/service/ecr/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancing/types"
	elbv2 "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbv2types "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"github.com/aws/smithy-go"
	"github.com/hashicorp/terraform-exec/tfexec"

	"nuon.dev/nuon/internal/atomicfile"
	"nuon.dev/nuon/stack"
)

// The AWS teardown: what Delete does on CloudAWS once the agent reported
// every component deleted. Each step uses only the deprovision role's
// credentials, and every AWS call has a deadline (AWSOptions.Timeout).

// Tags by which Kubernetes controllers mark the load balancers they make:
// the AWS Load Balancer Controller (ELBv2, for Ingresses and Services)
// and the cloud provider's service controller (classic ELBs and NLBs for
// Services of type LoadBalancer).
const (
	tagELBv2Cluster = "elbv2.k8s.aws/cluster"  // = <cluster>
	tagKubeCluster  = "kubernetes.io/cluster/" // <cluster> = owned
)

// LoadBalancer is a load balancer left in an install's sandbox.
type LoadBalancer struct {
	// Name is its name; ARN is set for ELBv2 ones.
	Name, ARN string
	// Type is application, network, gateway or classic.
	Type string
	// VPC is its VPC's id.
	VPC string
	// Why says how it was found: a controller's tag, or its VPC.
	Why string
}

func (lb LoadBalancer) String() string {
	return fmt.Sprintf("%s (%s, %s, %s)", lb.Name, lb.Type, lb.VPC, lb.Why)
}

// LoadBalancersLeftError is Delete's refusal to destroy a sandbox that
// still holds load balancers: they keep network interfaces and security
// groups in the VPC's subnets, and terraform destroy would fail on them
// half way. Nothing deletes them behind their controller's back; see the
// package doc.
type LoadBalancersLeftError struct {
	Cluster       string
	LoadBalancers []LoadBalancer
	Waited        time.Duration
}

var _ error = (*LoadBalancersLeftError)(nil)

func (e *LoadBalancersLeftError) Error() string {
	names := make([]string, len(e.LoadBalancers))
	for i, lb := range e.LoadBalancers {
		names[i] = lb.String()
	}
	return fmt.Sprintf("%d load balancer(s) of cluster %s still exist after %s: %s; delete the Services of type LoadBalancer and the Ingresses that made them (or, with the customer, the load balancers), then run the delete again",
		len(e.LoadBalancers), e.Cluster, e.Waited, strings.Join(names, ", "))
}

// awsConfig is the SDK configuration of the deprovision role: the
// tenant's configuration (region, endpoint settings) with only the
// role's credentials and an HTTP client that gives up at the deadline.
func (o *Options) awsConfig(creds *stack.Credentials) aws.Config {
	cfg := o.AWS.Tenant.Copy()
	cfg.Region = o.AWS.Region
	cfg.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken))
	cfg.HTTPClient = awshttp.NewBuildableClient().WithTimeout(o.AWS.Timeout)
	return cfg
}

// call runs one AWS call with the deadline and names what went wrong:
// stack.ErrTimeout when the endpoint did not answer in time,
// stack.ErrAccessDenied when the role may not.
func call[T any](ctx context.Context, o *Options, what string, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, o.AWS.Timeout)
	defer cancel()
	out, err := f(ctx)
	if err == nil {
		return out, nil
	}
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &apiErr) && strings.HasPrefix(apiErr.ErrorCode(), "AccessDenied"):
		err = fmt.Errorf("%s: %w: %s (check the deprovision role's policy)", what, stack.ErrAccessDenied, apiErr.ErrorMessage())
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("%s: %w (%s): %w", what, stack.ErrTimeout, o.AWS.Timeout, context.DeadlineExceeded)
	default:
		err = fmt.Errorf("%s: %w", what, err)
	}
	return out, err
}

// sandboxNames are what the teardown looks for: the cluster's name, the
// VPC's id and the repository prefix, from the outputs Create recorded;
// without them (the install was created elsewhere), the names
// sandboxes/aws-eks gives (nuon-<id>, nuon/<id>) and no VPC.
func (o *Options) sandboxNames() (cluster, vpc, prefix string) {
	cluster, prefix = "nuon-"+o.ID, "nuon/"+o.ID
	if outs, err := readOutputs(o); err == nil {
		if outs.Cluster.Name != "" {
			cluster = outs.Cluster.Name
		}
		if outs.Registry.RepositoryPrefix != "" {
			prefix = outs.Registry.RepositoryPrefix
		}
		vpc = outs.VPC.ID
	}
	return cluster, vpc, prefix
}

// assumeDeprovision assumes the install's deprovision role, which the
// rest of the teardown uses.
func assumeDeprovision(ctx context.Context, o *Options, st *state) (string, string, error) {
	creds, err := o.assume(ctx, stack.Deprovision)
	if err != nil {
		return "", "", err
	}
	o.Logger.InfoContext(ctx, "assumed the deprovision role", "install", o.ID, "credentials", creds)
	st.creds = creds
	return Done, creds.String(), nil
}

// waitLoadBalancers waits, up to AWSOptions.LoadBalancerWait, until no
// load balancer is left in the sandbox, and fails with a
// *LoadBalancersLeftError naming each one that is.
func waitLoadBalancers(ctx context.Context, o *Options, st *state) (string, string, error) {
	cluster, vpc, _ := o.sandboxNames()
	cfg := o.awsConfig(st.creds)
	v2 := elbv2.NewFromConfig(cfg, func(opt *elbv2.Options) {
		if o.AWS.ELBEndpoint != "" {
			opt.BaseEndpoint = aws.String(o.AWS.ELBEndpoint)
		}
	})
	classic := elb.NewFromConfig(cfg, func(opt *elb.Options) {
		if o.AWS.ELBEndpoint != "" {
			opt.BaseEndpoint = aws.String(o.AWS.ELBEndpoint)
		}
	})
	start := time.Now()
	poll := min(max(o.AWS.LoadBalancerWait/20, 100*time.Millisecond), 10*time.Second)
	for waited := false; ; waited = true {
		left, err := loadBalancers(ctx, o, v2, classic, cluster, vpc)
		if err != nil {
			return "", "", err
		}
		if len(left) == 0 {
			if waited {
				return Done, fmt.Sprintf("the load balancers of cluster %s went in %s", cluster, time.Since(start).Round(time.Second)), nil
			}
			return Unchanged, "no load balancer of cluster " + cluster, nil
		}
		if time.Since(start) >= o.AWS.LoadBalancerWait {
			return "", "", &LoadBalancersLeftError{Cluster: cluster, LoadBalancers: left, Waited: o.AWS.LoadBalancerWait}
		}
		o.Logger.InfoContext(ctx, "waiting for load balancers to go", "install", o.ID, "left", len(left))
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(poll):
		}
	}
}

// loadBalancers lists the load balancers of both ELB APIs that belong to
// the sandbox: tagged for its cluster, or in its VPC.
func loadBalancers(ctx context.Context, o *Options, v2 *elbv2.Client, classic *elb.Client, cluster, vpc string) ([]LoadBalancer, error) {
	why := func(lbVPC string, tags map[string]string) string {
		switch {
		case tags[tagELBv2Cluster] == cluster:
			return tagELBv2Cluster + "=" + cluster
		case tags[tagKubeCluster+cluster] != "":
			return tagKubeCluster + cluster + "=" + tags[tagKubeCluster+cluster]
		case vpc != "" && lbVPC == vpc:
			return "in the sandbox's VPC"
		}
		return ""
	}
	var all []LoadBalancer
	var marker *string
	for {
		out, err := call(ctx, o, "elbv2 DescribeLoadBalancers", func(ctx context.Context) (*elbv2.DescribeLoadBalancersOutput, error) {
			return v2.DescribeLoadBalancers(ctx, &elbv2.DescribeLoadBalancersInput{Marker: marker})
		})
		if err != nil {
			return nil, err
		}
		for _, lb := range out.LoadBalancers {
			all = append(all, LoadBalancer{Name: aws.ToString(lb.LoadBalancerName), ARN: aws.ToString(lb.LoadBalancerArn), Type: string(lb.Type), VPC: aws.ToString(lb.VpcId)})
		}
		if marker = out.NextMarker; aws.ToString(marker) == "" {
			break
		}
	}
	tags := map[string]map[string]string{} // ARN or classic name → tags
	for batch := range slices.Chunk(all, 20) {
		arns := make([]string, len(batch))
		for i, lb := range batch {
			arns[i] = lb.ARN
		}
		out, err := call(ctx, o, "elbv2 DescribeTags", func(ctx context.Context) (*elbv2.DescribeTagsOutput, error) {
			return v2.DescribeTags(ctx, &elbv2.DescribeTagsInput{ResourceArns: arns})
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.TagDescriptions {
			tags[aws.ToString(d.ResourceArn)] = tagMap(d.Tags, func(t elbv2types.Tag) (*string, *string) { return t.Key, t.Value })
		}
	}
	n2 := len(all)
	marker = nil
	for {
		out, err := call(ctx, o, "elb DescribeLoadBalancers", func(ctx context.Context) (*elb.DescribeLoadBalancersOutput, error) {
			return classic.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{Marker: marker})
		})
		if err != nil {
			return nil, err
		}
		for _, lb := range out.LoadBalancerDescriptions {
			all = append(all, LoadBalancer{Name: aws.ToString(lb.LoadBalancerName), Type: "classic", VPC: aws.ToString(lb.VPCId)})
		}
		if marker = out.NextMarker; aws.ToString(marker) == "" {
			break
		}
	}
	for batch := range slices.Chunk(all[n2:], 20) {
		names := make([]string, len(batch))
		for i, lb := range batch {
			names[i] = lb.Name
		}
		out, err := call(ctx, o, "elb DescribeTags", func(ctx context.Context) (*elb.DescribeTagsOutput, error) {
			return classic.DescribeTags(ctx, &elb.DescribeTagsInput{LoadBalancerNames: names})
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.TagDescriptions {
			tags[aws.ToString(d.LoadBalancerName)] = tagMap(d.Tags, func(t elbtypes.Tag) (*string, *string) { return t.Key, t.Value })
		}
	}
	var left []LoadBalancer
	for i, lb := range all {
		key := lb.ARN
		if i >= n2 {
			key = lb.Name
		}
		if lb.Why = why(lb.VPC, tags[key]); lb.Why != "" {
			left = append(left, lb)
		}
	}
	return left, nil
}

// deleteRepositories deletes every ECR repository under the sandbox's
// repository prefix, images and all: the agent made them when it copied
// artifacts in, so they are in no Terraform state. Terraform's own (the
// sandbox's repositories input, force_delete) go too; its destroy treats
// a repository already gone as deleted.
func deleteRepositories(ctx context.Context, o *Options, st *state) (string, string, error) {
	_, _, prefix := o.sandboxNames()
	api := ecr.NewFromConfig(o.awsConfig(st.creds), func(opt *ecr.Options) {
		if o.AWS.ECREndpoint != "" {
			opt.BaseEndpoint = aws.String(o.AWS.ECREndpoint)
		}
	})
	var names []string
	var token *string
	for {
		out, err := call(ctx, o, "ecr DescribeRepositories", func(ctx context.Context) (*ecr.DescribeRepositoriesOutput, error) {
			return api.DescribeRepositories(ctx, &ecr.DescribeRepositoriesInput{RegistryId: aws.String(o.AWS.Account), NextToken: token})
		})
		if err != nil {
			return "", "", err
		}
		for _, r := range out.Repositories {
			if n := aws.ToString(r.RepositoryName); strings.HasPrefix(n, prefix+"/") {
				names = append(names, n)
			}
		}
		if token = out.NextToken; aws.ToString(token) == "" {
			break
		}
	}
	if len(names) == 0 {
		return Unchanged, "no repository under " + prefix + "/", nil
	}
	for _, n := range names {
		_, err := call(ctx, o, "ecr DeleteRepository "+n, func(ctx context.Context) (*ecr.DeleteRepositoryOutput, error) {
			return api.DeleteRepository(ctx, &ecr.DeleteRepositoryInput{RegistryId: aws.String(o.AWS.Account), RepositoryName: aws.String(n), Force: true})
		})
		if _, gone := errors.AsType[*ecrtypes.RepositoryNotFoundException](err); err != nil && !gone {
			return "", "", err
		}
		o.Logger.InfoContext(ctx, "deleted a repository", "install", o.ID, "repository", n)
	}
	return Done, "deleted " + strings.Join(names, ", "), nil
}

// awsDestroy destroys sandboxes/aws-eks with the deprovision role's
// credentials, its state in the stack's bucket; with nothing in the state
// it does nothing.
func awsDestroy(ctx context.Context, o *Options, st *state) (string, string, error) {
	tf, err := o.awsTerraform(ctx, st.creds)
	if err != nil {
		return "", "", err
	}
	show, err := tf.Show(ctx)
	if err != nil {
		return "", "", fmt.Errorf("terraform show: %w", err)
	}
	if show.Values == nil || show.Values.RootModule == nil || len(show.Values.RootModule.Resources) == 0 && len(show.Values.RootModule.ChildModules) == 0 {
		return Unchanged, "nothing in the state", nil
	}
	dopts := []tfexec.DestroyOption{tfexec.LockTimeout(lockWait)}
	for _, v := range o.awsVars(nil) {
		dopts = append(dopts, tfexec.Var(v))
	}
	if err := tf.Destroy(ctx, dopts...); err != nil {
		return "", "", fmt.Errorf("terraform destroy: %w", err)
	}
	if err := os.Remove(o.path(OutputsFile)); err != nil && !os.IsNotExist(err) {
		return "", "", err
	}
	if err := atomicfile.Write(o.path(DestroyedFile), []byte(o.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", "", err
	}
	return Done, "sandboxes/aws-eks destroyed", nil
}

// DestroyedFile, in the install's directory, says when Delete destroyed
// the AWS sandbox. A re-run that finds it (the archive phase failed, say,
// and the customer deleted the stack since) skips the AWS phases instead
// of assuming a role that may be gone. Without it, they run again: each
// checks what is left.
const DestroyedFile = "sandbox/destroyed"

// unlessDestroyed skips a phase of the AWS teardown once DestroyedFile
// says the sandbox is gone.
func unlessDestroyed(p phase) phase {
	run := p.run
	p.run = func(ctx context.Context, o *Options, st *state) (string, string, error) {
		if b, err := os.ReadFile(o.path(DestroyedFile)); err == nil {
			return Unchanged, "the sandbox was destroyed at " + strings.TrimSpace(string(b)), nil
		}
		return run(ctx, o, st)
	}
	return p
}

// tagMap is a load balancer's tags by key, from either ELB API's tag type.
func tagMap[T any](tags []T, kv func(T) (key, value *string)) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		k, v := kv(t)
		m[aws.ToString(k)] = aws.ToString(v)
	}
	return m
}
