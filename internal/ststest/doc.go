// Package ststest is a loopback stand-in for AWS STS for tests. It speaks
// the query protocol aws-sdk-go-v2 uses (internal/awstest holds its
// plumbing, shared with internal/elbtest): POST / with a form body
// (Action=AssumeRole&Version=2011-06-15&RoleArn=…&ExternalId=…), signed
// with SigV4 (the caller is known by the access key of its Authorization
// header), answered with an XML AssumeRoleResponse, or with an XML
// ErrorResponse and HTTP 403 (AccessDenied, InvalidClientTokenId) or 400.
//
// It knows callers (access key → principal ARN) and roles (ARN, the
// account they trust, the ExternalId they require), refuses a wrong or
// missing ExternalId as STS does, issues fresh temporary credentials, and
// records every call. Signatures of AssumeRole are not verified: the
// stand-in checks who calls, not their cryptography.
//
// GetCallerIdentity is answered too, signed (POST, the caller by its
// access key, a known caller's or credentials this server issued) and presigned (GET /?Action=GetCallerIdentity&X-Amz-…, the
// form of an EKS token, which aws-iam-authenticator forwards to STS with
// the x-k8s-aws-id header). A presigned request is checked as STS does:
// only credentials this server issued, their session token, the
// signature recomputed with their secret over every signed header (so a
// token for one cluster does not pass for another), and its expiry. The
// answer is the assumed-role session's ARN, in XML or, when the request
// accepts application/json, in JSON.
//
// Secret gives the secret and session token of the credentials it issued,
// for other stand-ins to check signatures with (internal/s3test).
//
// Point the SDK at it with sts.Options.BaseEndpoint (or
// AWS_ENDPOINT_URL_STS) set to Server.URL. BlackHole gives an endpoint
// that accepts connections and never answers, for deadline tests.
package ststest
