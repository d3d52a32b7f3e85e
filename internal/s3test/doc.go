// Package s3test is a loopback stand-in for Amazon S3 for tests: enough of
// S3's REST-XML protocol for Terraform's s3 backend (and aws-sdk-go-v2's
// S3 client) to keep a state and its lock file in it. Requests are
// path-style (http://URL/BUCKET/KEY; the client sets use_path_style or
// UsePathStyle).
//
// It answers HeadBucket, ListObjectsV2 (prefix, delimiter), GetObject,
// HeadObject, PutObject (with If-None-Match: * refused with 412
// PreconditionFailed when the object exists: how use_lockfile takes a
// lock) and DeleteObject; anything else is 501 NotImplemented, and
// recorded. Errors are S3's XML <Error> with its codes (NoSuchBucket,
// NoSuchKey, AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch…).
//
// Every request must be signed with SigV4 in its Authorization header by
// credentials the server knows (Keys: internal/ststest's Server.Secret
// gives those it issued). The signature is recomputed over the headers it
// names with the key's secret and session token, and a signed payload hash
// (x-amz-content-sha256) is checked against the body: a request made with
// another secret, another token, an unknown key or an altered body is
// refused with 403, as S3 does.
package s3test
