package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

// buildAgentEnv are the variables of the agent's environment a build may
// see: the signing key's password, the registry's credentials. Nothing
// else of the agent's environment reaches a build.
var buildAgentEnv = []string{"COSIGN_PASSWORD", "NUON_REGISTRY_PASSWORD", "DOCKER_CONFIG",
	"AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_ECR", "SSL_CERT_FILE"}

type buildAgentOptions struct {
	server, key, repo, cosignKey, builderKey, builderID, workDir, cacheDir string
	buildFlags                                                             []string
	buildExe                                                               string
	parallel                                                               int
	timeout, lease                                                         time.Duration
}

func newBuildAgentCmd(g *cli.Globals) *cobra.Command {
	o := &buildAgentOptions{}
	cmd := &cobra.Command{
		Use:   "build-agent --server URL --key SSH_KEY --repo TENANT --cosign-key cosign.key",
		Short: "Take signed build requests from the tenant server, build, push, sign and release them",
		Long: `Build-agent runs in the vendor's account and keeps one outbound connection to
the tenant server ('nuon server'): it long-polls POST /builds/next, signed with
its own ed25519 SSH key (a key of trust/build-agents on main), for build
requests vendor CI filed with 'nuon build --remote'.

Each request is judged again here against main: signed by a key of
trust/builds whose principal is the request's requester, not expired, a
component of nuon.yaml, from a source repository (and ref) that
trust/build-sources.yaml on main allows for the component, a commit the
source repository holds and reachable from the ref the request names, an id
that did not fail here before (the ledger in --work-dir). A refused request
builds nothing; its reason is the answer vendor CI prints.

A request is taken under a lease (--lease), renewed while it builds. The
server keeps its queue on git refs (refs/heads/nuon/builds/<id>): when this
agent dies, the lease runs out and another agent takes the request; when the
server restarts, the agent goes on and answers once it is back. The release
on main is the request's idempotency key: the release commit names the
request, and a request whose release is on main already is answered with it,
never released twice.

A request that passes is built by 'nuon build' as a child process of its own
(its own process group, a fresh directory under --work-dir with the source
checked out at the commit, an environment of PATH, HOME and the credentials
below alone), which pushes to the vendor registry, signs with --cosign-key and
with --builder-key writes SLSA provenance; then the agent records the release
on main of --repo (releases/<component>.yaml, the request's version) and
answers the server with the digests and the release commit. --parallel
builds run at once, none sharing a directory.

The agent is the only holder of the push credential and the signing keys:
COSIGN_PASSWORD, NUON_REGISTRY_PASSWORD, DOCKER_CONFIG and the AWS variables
are the only variables passed to builds.`,
		Example: `  nuon build-agent --server https://nuon.vendor.example --key build-agent.key \
      --repo git@github.com:acme/tenant.git --release-key release.key \
      --cosign-key cosign.key --builder-key builder.key --builder-id https://builds.vendor.example/agent-1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBuildAgent(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.server, "server", os.Getenv("NUON_SERVER_URL"), "the tenant server's URL (default $NUON_SERVER_URL)")
	f.StringVar(&o.key, "key", "", "the agent's OpenSSH ed25519 private key, listed in trust/build-agents on main (required)")
	f.StringVar(&o.repo, "repo", "", "the tenant repository the releases are recorded on (a path or URL) (required)")
	f.StringVar(&o.cosignKey, "cosign-key", "", "the vendor's cosign private key (password in COSIGN_PASSWORD) (required)")
	f.StringVar(&o.builderKey, "builder-key", "", "cosign private key of the builders role: write SLSA provenance")
	f.StringVar(&o.builderID, "builder-id", "", "the builder's id in the provenance (with --builder-key)")
	f.StringVar(&o.workDir, "work-dir", "", "where builds run and the ledger of request ids is kept (default: the user cache directory)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep a mirror of a remote --repo")
	f.StringArrayVar(&o.buildFlags, "build-flag", nil, "a flag passed to every nuon build, e.g. --build-flag=--registry-username=ci (repeatable)")
	f.IntVar(&o.parallel, "parallel", 2, "builds at once")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "longest a build may run")
	f.DurationVar(&o.lease, "lease", schemas.DefaultBuildLease, "how long a request taken stays this agent's without a renewal (renewed every third of it; 2s to 10m): when the agent dies, the server gives the request to another agent after it")
	f.StringVar(&o.buildExe, "build-exe", "", "the program run as 'nuon build' for each request (default: this nuon binary); a wrapper that runs nuon in a sandbox of your own fits here")
	_ = cmd.MarkFlagRequired("key")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("cosign-key")
	return cmd
}

func runBuildAgent(ctx context.Context, g *cli.Globals, o *buildAgentOptions) error {
	if o.server == "" {
		return errors.New("--server (or $NUON_SERVER_URL) is required")
	}
	if o.builderKey != "" && o.builderID == "" {
		return errors.New("--builder-key needs --builder-id")
	}
	key, err := signature.LoadSigner(o.key)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	if o.workDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		o.workDir = filepath.Join(cache, "nuon", "build-agent")
	}
	if err := os.MkdirAll(o.workDir, 0o700); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if o.buildExe != "" {
		exe, _ = filepath.Abs(o.buildExe)
	}
	abs := func(p string) string {
		if p == "" {
			return ""
		}
		a, _ := filepath.Abs(p)
		return a
	}
	var env []string
	for _, k := range buildAgentEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	name, email, err := releaseAuthor("")
	if err != nil {
		return err
	}
	a := &builder.Agent{
		Tenant: repo, Exe: exe, WorkDir: o.workDir, Env: env, BuildArgs: o.buildFlags, Timeout: o.timeout, Lease: o.lease,
		Key: abs(o.cosignKey), BuilderKey: abs(o.builderKey), BuilderID: o.builderID,
		Release: builder.ReleaseOptions{Name: name, Email: email, Now: time.Now, Signer: key},
		Logger:  g.Logger(),
	}
	g.Logger().Info("build agent started", "server", o.server, "parallel", o.parallel)
	err = a.Serve(ctx, buildreq.NewClient(o.server, key), o.parallel)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// remoteBuildOptions are nuon build's flags for a build by the build agent.
type remoteBuildOptions struct {
	remote                      bool
	server, commit, version     string
	repository, ref, id, output string
	requester                   string
	expires, reconnect          time.Duration
}

// withRemoteBuild adds --remote to nuon build: file a signed build request
// with the tenant server and wait for the build agent's answer.
func withRemoteBuild(cmd *cobra.Command, g *cli.Globals) *cobra.Command {
	o := &remoteBuildOptions{}
	f := cmd.Flags()
	f.BoolVar(&o.remote, "remote", false, "file a signed build request with the tenant server (--server) and wait for the build agent; --key is then the OpenSSH key of trust/builds")
	f.StringVar(&o.server, "server", os.Getenv("NUON_SERVER_URL"), "with --remote: the tenant server's URL (default $NUON_SERVER_URL)")
	f.StringVar(&o.commit, "commit", "", "with --remote: the full commit id to build")
	f.StringVar(&o.version, "version", "", "with --remote: the version to release")
	f.StringVar(&o.repository, "source-repository", "", "with --remote: the source repository the build agent clones")
	f.StringVar(&o.ref, "ref", "", "with --remote: the ref that named the commit, for the provenance")
	f.StringVar(&o.id, "request-id", "", "with --remote: the request's id (default: COMPONENT-random)")
	f.StringVar(&o.requester, "requester", "", "with --remote: the key's principal in trust/builds (default: $USER)")
	f.DurationVar(&o.expires, "expires", time.Hour, "with --remote: how long the request may wait to be built")
	f.DurationVar(&o.reconnect, "reconnect", 10*time.Minute, "with --remote: how long to keep trying while the server does not answer (it keeps the request across a restart)")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !o.remote {
			return run(c, args)
		}
		o.output, _ = c.Flags().GetString("output")
		key, _ := c.Flags().GetString("key")
		if err := cli.CheckOutput(o.output); err != nil {
			return err
		}
		return runRemoteBuild(c.Context(), g, o, key, args)
	}
	return cmd
}

func runRemoteBuild(ctx context.Context, g *cli.Globals, o *remoteBuildOptions, keyFile string, args []string) error {
	switch {
	case len(args) != 1:
		return errors.New("--remote builds exactly one component: name it")
	case o.server == "":
		return errors.New("--remote needs --server (or $NUON_SERVER_URL)")
	case o.commit == "" || o.version == "" || o.repository == "":
		return errors.New("--remote needs --commit, --version and --source-repository")
	}
	key, err := signature.LoadSigner(keyFile)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	if o.id == "" {
		b := make([]byte, 6)
		rand.Read(b)
		o.id = args[0] + "-" + hex.EncodeToString(b)
	}
	if o.requester == "" {
		o.requester = os.Getenv("USER")
	}
	now := time.Now()
	sub, err := buildreq.SignRequest(schemas.BuildRequest{
		ID: o.id, Component: args[0], Repository: o.repository, Commit: strings.ToLower(o.commit), Ref: o.ref,
		Version: o.version, Requester: o.requester, Created: now, Expires: now.Add(o.expires)}, key)
	if err != nil {
		return err
	}
	c := buildreq.NewClient(o.server, key)
	component := args[0]
	say := func(format string, a ...any) {
		if o.output != "json" {
			fmt.Fprintf(g.Stderr, "nuon: build %s of %s: %s (%s)\n", o.id, component, fmt.Sprintf(format, a...), time.Since(now).Round(time.Millisecond))
		}
	}
	// The server keeps the queue on git refs: while it restarts, filing
	// and waiting are tried again, up to --reconnect.
	var st *schemas.BuildStatus
	lastOK, retried := time.Now(), false
	for st == nil {
		st, err = c.File(ctx, sub)
		switch {
		case err == nil:
		case retried && strings.Contains(err.Error(), buildreq.ErrReplayed.Error()):
			// An earlier try reached the server; its answer was lost.
			if st, err = c.Status(ctx, o.id, 0); err != nil {
				return err
			}
		case buildreq.Final(err) || time.Since(lastOK) > o.reconnect || ctx.Err() != nil:
			return err
		default:
			if !retried {
				say("the server is not answering (%v): trying again for up to %s", err, o.reconnect)
			}
			retried = true
			sleepCtx(ctx, time.Second)
		}
	}
	last, down := "", false
	var agent string
	attempt, requeueSaid := 0, false
	for {
		// A request queued again and taken at once may show only its
		// next take: say why the agent changed all the same.
		if st.Attempt > attempt && attempt > 0 && !requeueSaid {
			say("the lease of build agent %s ran out: queued again", agent)
		}
		if st.State == schemas.BuildQueued && st.Note != "" {
			requeueSaid = true
		}
		if st.Attempt > attempt {
			attempt, agent, requeueSaid = st.Attempt, st.Agent, st.State == schemas.BuildQueued && st.Note != ""
		}
		if p := progressLine(st); p != last {
			say("%s", p)
			last = p
		}
		if st.State != schemas.BuildQueued && st.State != schemas.BuildRunning {
			break
		}
		next, err := c.Status(ctx, o.id, 10)
		switch {
		case err == nil:
			if down {
				say("the server is back")
				down = false
			}
			st, lastOK = next, time.Now()
		case buildreq.Final(err) || ctx.Err() != nil:
			return err
		case time.Since(lastOK) > o.reconnect:
			return fmt.Errorf("the server did not answer for %s: %w (the request stays queued there: nuon build --remote --request-id %s files nothing new; wait for it again later)", o.reconnect, err, o.id)
		default:
			if !down {
				say("lost the server (%v): reconnecting for up to %s", err, o.reconnect)
				down = true
			}
			sleepCtx(ctx, time.Second)
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	}
	if st.State == schemas.BuildFailed {
		fmt.Fprintf(g.Stderr, "nuon: build %s failed: %s\n", st.ID, st.Error)
		return cli.ExitError{Code: 1}
	}
	if o.output != "json" {
		var res builder.BuildResult
		if err := json.Unmarshal(st.Result, &res); err == nil {
			printBuild(g.Stdout, "text", res.Artifacts)
			if res.Release != nil && res.Release.Commit != "" {
				fmt.Fprintf(g.Stdout, "released %s %s\nmain → %s\n", res.Component, res.Version, res.Release.Commit)
			}
		}
	}
	return nil
}

// progressLine says where a build request is: queued, taken by an agent,
// in a phase of its build, released or failed.
func progressLine(st *schemas.BuildStatus) string {
	switch st.State {
	case schemas.BuildQueued:
		if st.Note != "" {
			return "queued (" + st.Note + ")"
		}
		return "queued"
	case schemas.BuildRunning:
		line := fmt.Sprintf("taken by %s (attempt %d)", st.Agent, st.Attempt)
		if st.Phase != "" {
			line += ", building: " + st.Phase
		}
		return line
	case schemas.BuildSucceeded:
		if st.ReleaseCommit != "" {
			return fmt.Sprintf("released by %s in %s", st.Agent, st.ReleaseCommit)
		}
		return "succeeded"
	}
	return st.State
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
