// Package sync copies a component's artifacts from the vendor registry
// into the install's own registry before the agent runs its job, so that
// an install deploys only from its registry and never depends on the
// vendor at run time.
//
// # What a sync does
//
// The rendered desired state pins every artifact by digest twice: Source
// is the vendor reference (vendor-registry/repo@sha256:…), Local the
// install's (install-registry/prefix/repo@sha256:…, the same digest).
// For each artifact, Syncer.Sync:
//
//  1. asks the install registry whether it has the manifest (one HEAD by
//     digest). If it has and this Syncer verified the digest's signature
//     before, the artifact is done: a present artifact costs one request.
//     If it has but was not verified yet (a restarted agent), the copy of
//     the signature beside it is verified instead.
//  2. reads the manifest from the vendor registry by digest and checks
//     that it hashes to it;
//  3. reads the cosign signature manifest (the sha256-<hex>.sig tag) and
//     checks that one of its simple-signing payloads names the digest and
//     carries a signature that verifies with the vendor's public key.
//     This needs only go-containerregistry and sigstore's signature
//     package, not cosign; tests prove cosign's own verification agrees;
//  4. creates the repository when the registry needs that (ECR);
//  5. copies the signature manifest, then the artifact's blobs (each
//     verified against its digest as it streams), then its manifest, with
//     a remote.Pusher made for this Sync call only. A manifest in the
//     install registry therefore always has its blobs and signature.
//
// # Refusals and retries
//
// An unsigned artifact (ErrUnsigned), one signed only by other keys
// (ErrBadSignature) and content that does not match its digest
// (ErrDigestMismatch) are refused: *Error with Refused set, nothing of the
// artifact is copied, and the agent starts no job for the component and
// records why. A registry that fails in a way that may pass (network,
// 5xx, 429) is retried a few times with a growing pause, then reported as
// a Temporary *Error; the agent tries the component again later.
//
// # Install registries
//
// Any OCI registry works with ordinary credentials (oci.WithAuth). For
// Amazon ECR, ECR supplies both what the registry needs: basic-auth
// credentials from GetAuthorizationToken, refreshed before they expire,
// and CreateRepository before the first push to a repository (an existing
// repository is fine). ParseECRHost recognises ECR hosts.
package sync
