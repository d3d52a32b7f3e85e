// Package oci is nuon's OCI plumbing: reproducible packaging of a
// directory as an artifact, extraction that verifies every digest and
// stays inside its directory, cosign signature checks without cosign, and
// a registry client that shakes hands with each registry once.
//
// # Packaging
//
// Archive writes files as a gzipped tar whose bytes depend only on the
// files' names, contents and executable bits; Package and PackageFiles
// wrap such an archive in an OCI image manifest with a config blob, with
// the media types of a Kind (Terraform, Manifests, Helm). NewArtifact is
// the manifest builder underneath. builder/doc.go lists the media types.
//
// # Extraction
//
// Extract unpacks a gzipped tar blob into a directory. It hashes the blob
// as it reads and reads it to the end, unpacks next to the directory and
// moves the result in only when size and digest match (ErrDigestMismatch
// otherwise), and refuses anything but directories and regular files,
// paths that leave the directory, and archives beyond its bounds
// (ErrUnsafeArchive). Source is the reconciler.ArtifactSource jobs use:
// it reads an artifact's manifest from the install registry by digest and
// extracts its content layer. Layout does the same from an OCI image
// layout on local disk (`nuon job run --artifacts`, for development and
// air-gapped tests), with the same checks: a local directory is never
// trusted more than a registry.
//
// # Signatures
//
// Cosign stores the signatures of an artifact with digest D as an image
// manifest tagged sha256-<D>.sig in the artifact's repository (the scheme
// for registries without the referrers API, such as Distribution 2.8).
// Each layer is a simple-signing payload naming D, with its signature in
// the dev.cosignproject.cosign/signature annotation. Client.VerifySignature
// checks that at least one payload verifies with the vendor's public key
// and names D: ErrUnsigned, ErrBadSignature or ErrDigestMismatch
// otherwise. Only go-containerregistry and sigstore's signature package
// are needed, which keeps cosign out of the agent.
//
// # Client
//
// Client keeps one authenticated transport per registry (per repository
// for registries with repository-scoped tokens), so a registry's
// authentication handshake happens once per process and a manifest check
// costs one request. Get, Head and Blob verify what they read; Entity
// turns a manifest read by digest into something go-containerregistry's
// pusher copies blob by blob, streaming, each blob verified.
package oci
