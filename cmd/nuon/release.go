package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/builder"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/schemas"
)

type releaseOptions struct {
	repo, version, from, key, author, output, cacheDir string
	artifacts                                          []string
	now                                                func() time.Time
}

func newReleaseCmd(g *cli.Globals) *cobra.Command {
	o := &releaseOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "release [COMPONENT...] --repo REPO --version VERSION (--from build.json | --artifact NAME=REPO@DIGEST)",
		Short: "Record a released version's artifact digests in releases/<component>.yaml on main",
		Long: `Release appends VERSION and its artifacts' digests to releases/<component>.yaml
on main, for each component named (or every component in --from), in one commit
(signed with --key if given), and pushes it. When main moved meanwhile it reads
it again and retries.

Releasing a version again with the same digests does nothing; with other
digests it is refused and nothing is written: a released version never changes.
A release moves no install. A pull request that changes a channel's pin does.

The digests come from 'nuon build --output json' (--from FILE, - for stdin) or,
for one component, from --artifact NAME=REPOSITORY@DIGEST.`,
		Example: `  nuon build --app nuon.yaml --src . --key cosign.key -o json > build.json
  nuon release --repo https://git.example.com/vendor/tenant.git --version 2.5.0 --from build.json api dashboards

  nuon release database --repo ./tenant.git --version 1.2.0 \
      --artifact module=registry.vendor.example/shop/database@sha256:0123… --key ci.key`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			return runRelease(cmd.Context(), g, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path, or a file://, https:// or ssh:// URL (required)")
	f.StringVar(&o.version, "version", "", "the version to release (required)")
	f.StringVar(&o.from, "from", "", "the output of 'nuon build -o json' (- for stdin)")
	f.StringArrayVar(&o.artifacts, "artifact", nil, "NAME=REPOSITORY@DIGEST of the one component named (repeatable)")
	f.StringVar(&o.key, "key", "", "OpenSSH private key that signs the commit")
	f.StringVar(&o.author, "author", "", "commit author, \"Name <email>\" (default: GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories (default: the user cache directory)")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("version")
	return cmd
}

func runRelease(ctx context.Context, g *cli.Globals, o *releaseOptions, names []string) error {
	records, err := releaseRecords(g, o, names)
	if err != nil {
		return err
	}
	opts := builder.ReleaseOptions{Now: o.now}
	if opts.Name, opts.Email, err = releaseAuthor(o.author); err != nil {
		return err
	}
	if o.key != "" {
		signer, err := signature.LoadSigner(o.key)
		if err != nil {
			return err
		}
		opts.Signer = signer
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	res, err := builder.Release(ctx, repo, records, opts)
	if errors.Is(err, builder.ErrConflict) {
		fmt.Fprintln(g.Stderr, "nuon:", err)
		fmt.Fprintln(g.Stderr, "nuon: a released version never changes; release a new version")
		return cli.ExitError{Code: 1}
	}
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, r := range res.Unchanged {
		fmt.Fprintf(g.Stdout, "%s: already released with these digests\n", r)
	}
	if res.Commit == "" {
		fmt.Fprintln(g.Stdout, "nothing to record; main unchanged")
		return nil
	}
	fmt.Fprintf(g.Stdout, "released %s\nmain → %s\n", strings.Join(res.Added, ", "), res.Commit)
	return nil
}

// releaseRecords reads the digests from --from or --artifact.
func releaseRecords(g *cli.Globals, o *releaseOptions, names []string) ([]builder.Record, error) {
	switch {
	case o.from != "" && len(o.artifacts) > 0:
		return nil, errors.New("give --from or --artifact, not both")
	case len(o.artifacts) > 0:
		if len(names) != 1 {
			return nil, errors.New("--artifact releases exactly one component: name it")
		}
		r := builder.Record{Component: names[0], Version: o.version, Artifacts: map[string]schemas.ReleaseArtifact{}}
		for _, a := range o.artifacts {
			n, ref, ok := strings.Cut(a, "=")
			repo, digest, ok2 := strings.Cut(ref, "@")
			if !ok || !ok2 || n == "" || repo == "" {
				return nil, fmt.Errorf("--artifact %q: want NAME=REPOSITORY@DIGEST", a)
			}
			r.Artifacts[n] = schemas.ReleaseArtifact{Repository: repo, Digest: digest}
		}
		return []builder.Record{r}, nil
	case o.from != "":
		var data []byte
		var err error
		if o.from == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(o.from)
		}
		if err != nil {
			return nil, err
		}
		var rep buildReport
		if err := json.Unmarshal(data, &rep); err != nil {
			return nil, fmt.Errorf("%s: %w", o.from, err)
		}
		byComp := map[string]*builder.Record{}
		var order []string
		for _, a := range rep.Artifacts {
			if len(names) > 0 && !slices.Contains(names, a.Component) {
				continue
			}
			r, ok := byComp[a.Component]
			if !ok {
				r = &builder.Record{Component: a.Component, Version: o.version, Artifacts: map[string]schemas.ReleaseArtifact{}}
				byComp[a.Component] = r
				order = append(order, a.Component)
			}
			r.Artifacts[a.Name] = schemas.ReleaseArtifact{Repository: a.Repository, Digest: a.Digest, MediaType: a.MediaType}
		}
		for _, n := range names {
			if byComp[n] == nil {
				return nil, fmt.Errorf("%s has no artifact of component %q", o.from, n)
			}
		}
		if len(order) == 0 {
			return nil, fmt.Errorf("%s has no artifacts", o.from)
		}
		records := make([]builder.Record, len(order))
		for i, n := range order {
			records[i] = *byComp[n]
		}
		return records, nil
	}
	return nil, errors.New("give the digests with --from build.json or --artifact NAME=REPOSITORY@DIGEST")
}

// releaseAuthor parses --author, falling back to git's variables.
func releaseAuthor(author string) (name, email string, err error) {
	if author != "" {
		a, err := mail.ParseAddress(author)
		if err != nil {
			return "", "", fmt.Errorf("--author %q: %w", author, err)
		}
		return a.Name, a.Address, nil
	}
	name, email = os.Getenv("GIT_AUTHOR_NAME"), os.Getenv("GIT_AUTHOR_EMAIL")
	if name == "" {
		name = "nuon release"
	}
	if email == "" {
		email = "release@nuon.invalid"
	}
	return name, email, nil
}
