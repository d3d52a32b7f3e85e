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
// records every call. Signatures are not verified: the stand-in checks who
// calls, not their cryptography.
//
// Point the SDK at it with sts.Options.BaseEndpoint (or
// AWS_ENDPOINT_URL_STS) set to Server.URL. BlackHole gives an endpoint
// that accepts connections and never answers, for deadline tests.
package ststest
