// Package builder is the vendor's build agent: it packages each component
// of the app as an OCI artifact, pushes it to the vendor registry by
// digest, signs it with the vendor's cosign key, and records released
// versions in releases/<component>.yaml on main. `nuon build` and `nuon
// release` are its commands; vendor CI runs them, or `nuon build-agent`
// runs them for vendor CI (see Build requests).
//
// # Artifacts
//
// Every component type has one artifact, named in the release file:
//
//	type       artifact    manifest config media type                     content layer media type
//	terraform  module      application/vnd.nuon.terraform.config.v1+json   application/vnd.nuon.terraform.module.v1.tar+gzip
//	manifests  manifests   application/vnd.nuon.manifests.config.v1+json   application/vnd.nuon.manifests.content.v1.tar+gzip
//	helm       chart       application/vnd.cncf.helm.config.v1+json        application/vnd.cncf.helm.chart.content.v1.tar+gzip
//	image      image       the image's own (copied unchanged, by digest)
//
// The first three are OCI image manifests
// (application/vnd.oci.image.manifest.v1+json) with one config blob and
// one gzipped tar layer. A module's or manifests' config is
// {"type":"terraform"} or {"type":"manifests"} and its layer holds the
// source directory as it is; a chart is stored as `helm push` stores it,
// the chart's metadata as config and the chart archive (one directory
// named after the chart) as layer, so `helm pull oci://…` works on it.
// Registries that predate OCI 1.1's artifactType, like Distribution 2.8,
// store these as they are.
//
// # Reproducible builds
//
// The digest of a directory artifact depends only on its files' names,
// contents and executable bits: entries are sorted, every time is the
// Unix epoch, owners are 0:0 without names, modes are 0755 or 0644, and
// the gzip header carries no name, time or OS (see internal/oci.Archive).
// Version control metadata (.git), Terraform's working directory
// (.terraform) and local Terraform state are never packaged; a chart is
// what Helm's loader reads, honouring .helmignore. Building the same
// source twice, on any machine with the same Go release, gives the same
// digest, so the release file on main can be checked against the source.
//
// # Sources
//
// `nuon build` reads nuon.yaml for the components and their
// repositories, and finds each component's source by convention under a
// root directory (--src), by component type (Layout):
//
//	modules/<component>     terraform
//	charts/<component>      helm
//	manifests/<component>   manifests
//	images/<component>      image: an OCI image layout directory
//
// The sandbox, when nuon.yaml declares one (schemas.AppSandbox), is built
// as the component sandbox: every folder of sandboxes/ under --src (or
// of --dir sandbox=PATH: this repository's sandboxes/) that holds a
// Terraform file is one terraform module artifact named after the folder
// (local, aws-eks), pushed to the sandbox's repository. `nuon release
// sandbox` records them together in releases/sandbox.yaml, and each
// install runs the one its sandbox.name names.
//
// --dir COMPONENT=PATH overrides the convention; for an image component
// PATH may also be an image reference (registry/repository@sha256:…),
// which is copied by digest. The repository fixtures/ follows this
// layout: fixtures/{modules,charts,manifests,images} hold the newest
// version of each component of the sample app and fixtures/previous/ the
// versions before; fixtures/tenant/releases records what they build to.
//
// # Signatures
//
// Each artifact is signed with the vendor's cosign key (cosign.key, as
// `cosign generate-key-pair` writes it; the password from
// COSIGN_PASSWORD), offline: no transparency log, no Fulcio certificate.
// The signature is stored as cosign stores it in a registry without the
// referrers API: an image manifest tagged sha256-<hex>.sig in the
// artifact's repository whose layers are simple-signing payloads naming
// the artifact's digest, each with its signature in the
// dev.cosignproject.cosign/signature annotation. Stock `cosign verify
// --key cosign.pub --insecure-ignore-tlog` accepts it, and the install
// agent checks it with internal/oci before it copies the artifact. A
// rebuild keeps an existing signature by the same key.
//
// # Releases
//
// Release appends a version and its artifacts' digests to
// releases/<component>.yaml in one commit on main (optionally signed with
// an SSH key, as render commits are) and moves main, retrying when main
// moved meanwhile. Releasing a version again with the same digests
// changes nothing; with other digests it fails with ErrConflict: a
// released version never changes. A release moves no install; a pull
// request that changes a channel's pin does.
//
// # Build requests
//
// So that no CI runner holds the registry push credential or the signing
// keys, `nuon build-agent` (Agent) holds them alone, in the vendor's
// account, and vendor CI only files build requests: a
// schemas.BuildRequest (id, component, source repository, full commit,
// ref, version, requester, created, expires) as JSON bytes with an SSH
// signature over exactly those bytes (package buildreq), by a key that
// trust/builds on main lists under the requester's name.
//
//	vendor CI ──POST /builds/requests──▶ nuon server ◀──POST /builds/next (long poll)── nuon build-agent
//	          ◀─GET /builds/requests/ID─┘             ──POST /builds/requests/ID/result─▶
//
// The build agent keeps one outbound connection to the server, signing
// its requests with its own ed25519 key (trust/build-agents on main).
// Each request it takes is judged again against main (Build): signature
// and requester (trust/builds), expiry, component of nuon.yaml, a source
// repository and ref that trust/build-sources.yaml on main allows for the
// component (buildreq.CheckSource), a commit the source repository holds
// and that is reachable from the ref the request names, an id that did
// not fail here before (Ledger, one file per id under the work directory,
// kept across restarts). Any failure is ErrRefused and builds nothing. A
// request that passes is built by `nuon build` as a child process in its
// own process group, with a fresh directory (the source checked out at
// the commit, nuon.yaml from main) and an environment of PATH, HOME and
// the credentials alone; it pushes, signs and (with a builder key) writes
// provenance. The agent then records the release on main (Release) and
// answers with the digests and the release commit. Several builds run at
// once (Serve's parallel), none sharing a directory.
//
// # The queue, leases and releasing once
//
// The server keeps the queue on git refs, one per request
// (schemas.BuildRef: refs/heads/nuon/builds/<id>), each change of state a
// commit signed by the server's key whose tree holds the signed request
// and its state (buildreq.Record): filed, taken by an agent under a lease,
// queued again when the lease ran out, succeeded with the release commit,
// failed with the error. A restarted server reads the refs and goes on:
// queued requests stay queued, running ones get a fresh lease. An agent
// takes a request under a lease (Agent.Lease) and renews it while it
// builds, reporting the phase (checkout, build, release); when the agent
// dies the lease runs out and the server hands the request to another
// agent, at most schemas.MaxBuildAttempts times. When the server answers a
// renewal with "not yours" the build stops.
//
// Two agents may so build one request (the first one was only cut off).
// The release on main is the idempotency key: the release commit carries
// the trailer Nuon-Build-Request: <id>, and before building, and again
// before every attempt to move main, the agent looks for a commit with
// that trailer signed by a build agent's key (FindRelease). When there is
// one, the request is answered with it and nothing is written: a request
// is released at most once, whichever agent got there first.
//
// Measured on this machine (2 shared cores; cmd/nuon TestBuildRemoteDurable):
// an agent killed in the build, the request released by another agent
// 3.6 s later with a 2 s lease; three requests queued across a server
// killed and restarted, released 5.2 s after an agent came up.
package builder
