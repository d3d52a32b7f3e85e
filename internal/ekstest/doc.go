// Package ekstest is a loopback stand-in for Amazon EKS for tests: the
// EKS API the SDK calls, and the cluster authentication EKS does for IAM
// principals, in front of a real kube-apiserver (internal/kubetest).
//
// # The API
//
// It speaks EKS's REST-JSON protocol as aws-sdk-go-v2's service/eks sends
// it, signed with SigV4 for service "eks" (the caller is recorded by the
// access key of its Authorization header; signatures are not recomputed):
//
//	GET    /clusters/{name}                                        DescribeCluster
//	POST   /clusters/{name}/access-entries                         CreateAccessEntry
//	GET    /clusters/{name}/access-entries                         ListAccessEntries
//	GET    /clusters/{name}/access-entries/{principalArn}          DescribeAccessEntry
//	DELETE /clusters/{name}/access-entries/{principalArn}          DeleteAccessEntry
//	POST   /clusters/{name}/access-entries/{principalArn}/access-policies  AssociateAccessPolicy
//
// Errors are EKS's: a JSON body with "__type" and "message" and the
// X-Amzn-ErrorType header, 404 ResourceNotFoundException for an unknown
// cluster or entry, 409 ResourceInUseException for an entry that exists,
// 400 InvalidParameterException for a principal that is not an IAM role
// or user ARN. Point the SDK at it with eks.Options.BaseEndpoint (or
// AWS_ENDPOINT_URL_EKS) set to Server.URL.
//
// # Cluster authentication
//
// Server.WebhookURL(name) is a webhook token authenticator (TokenReview
// v1) for kubetest.WithTokenWebhook. It authenticates a token as EKS's
// aws-iam-authenticator does: "k8s-aws-v1." and the base64url of a
// presigned STS GetCallerIdentity URL on the configured STS endpoint
// whose signed headers include x-k8s-aws-id; it forwards the URL to STS
// (internal/ststest checks the signature) with x-k8s-aws-id set to the
// cluster's name, and maps the caller (an assumed-role session is its
// role's ARN) to a Kubernetes user only while an access entry for it
// exists on that cluster: no entry, no user (the API server answers 401).
// SetPropagation delays a new entry's effect, as EKS's propagation does.
//
// Access policies are not an authorizer here: an entry with
// AmazonEKSClusterAdminPolicy at cluster scope is put in the group
// system:masters (what that policy grants), and any other policy in the
// group "eks:policy:<name>" with no RBAC binding, so it authorizes
// nothing unless a test binds it. The entry's kubernetesGroups are added
// as given.
package ekstest
