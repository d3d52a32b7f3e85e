package main

import (
	"nuon.dev/nuon/cmd/internal/cli"

	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/spf13/cobra"

	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/publish"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/renderer"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
)

type renderOptions struct {
	repo, key, source, output, cacheDir string
	dryRun                              bool
	retries                             int
	maxFileSize                         int64
	now                                 func() time.Time
}

func newRenderCmd(g *cli.Globals) *cobra.Command {
	o := &renderOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "render --repo REPO --key KEYFILE",
		Short: "Render every install's desired state from main into signed commits",
		Long: `Render reads the source files on main (nuon.yaml, channels/, releases/,
installs/), validates them, and renders each install's desired state.

It writes one signed commit on refs/heads/nuon/rendered whose tree holds
installs/<shard>/<id>/ for every install (shard: the first byte of the
SHA-256 of the id, in hex; "git ls-tree -r -d nuon/rendered installs/"
lists them), and, for each install whose state changed,
a signed commit on refs/heads/nuon/installs/<id> with that same tree. All
refs move together in one atomic push, or not at all. An unchanged install
gets no commit; running render twice moves nothing the second time.

On invalid input it prints every problem as FILE:LINE:COL: FIELD: MESSAGE,
moves no ref and exits 1. Invalid input includes a source file larger than
--max-file-size (checked from the blob's size, before it is read), a name
that looks like a source but is not read (installs/acme.YAML, nuon.yml,
Installs/), any entry of channels/, releases/ or installs/ other than
<name>.yaml, README.md and .gitkeep, and the entries a crafted git tree can
hold (installs/.., a name twice, links, submodules).

With --dry-run it writes nothing and prints, per install, the diff of its
rendered state: paste it into a pull request. For each channel that
declares a rollout it also prints the channel's waves and the installs in
each (with --output json, under "rollouts"), and refuses a rollout whose
waves cannot be assigned (a selector that matches no install, overlapping
waves, installs in no wave) with the channel file's line. The rollout
controller in nuon server enforces the waves: it writes each decision to
refs/heads/nuon/rollouts/<channel>, and every render, this one included,
gives an install the pins that ref holds for it (nuon rollout status shows
them). A channel with a rollout but no rollout ref yet, as when nuon render
runs without a server, renders its pins to every install.`,
		Example: `  # render main of a local repository
  nuon render --repo ./tenant.git --key render.key

  # release records have outgrown the 1 MiB cap on a source file
  nuon render --repo ./tenant.git --key render.key --max-file-size 4194304

  # what would a pull request change? (CI)
  nuon render --repo https://git.example.com/vendor/tenant.git --key render.key \
      --source refs/heads/promote-api --dry-run --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckOutput(o.output); err != nil {
				return err
			}
			return runRender(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", "", "tenant repository: a path, or a file://, https:// or ssh:// URL (required)")
	f.StringVar(&o.key, "key", "", "OpenSSH ed25519 private key that signs the commits (required)")
	f.StringVar(&o.source, "source", "refs/heads/main", "ref or commit to render from")
	f.BoolVar(&o.dryRun, "dry-run", false, "write nothing; print what would change")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&o.cacheDir, "cache-dir", "", "where to keep mirrors of remote repositories (default: the user cache directory)")
	f.IntVar(&o.retries, "retries", 3, "re-render this many times when another render moved a ref first")
	f.Int64Var(&o.maxFileSize, "max-file-size", schemas.DefaultMaxFileSize, "largest source file, in bytes")
	_ = cmd.MarkFlagRequired("repo")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// renderReport is the --output json document.
type renderReport struct {
	Source   string                   `json:"source"`
	Rendered string                   `json:"rendered,omitempty"`
	DryRun   bool                     `json:"dryRun"`
	Changed  int                      `json:"changed"`
	Installs []renderer.InstallResult `json:"installs"`
	Problems schemas.Problems         `json:"problems,omitempty"`
	Warnings []string                 `json:"warnings,omitempty"`
	// Rollouts are the waves of each channel that declares a rollout
	// (--dry-run only).
	Rollouts []*rollout.Waves `json:"rollouts,omitempty"`
}

func runRender(ctx context.Context, g *cli.Globals, o *renderOptions) error {
	log := g.Logger()
	signer, err := signature.LoadSigner(o.key)
	if err != nil {
		return err
	}
	repo, err := g.OpenRepo(o.repo, o.cacheDir)
	if err != nil {
		return err
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		// The render's phases log at debug level (how long each took).
		slog.SetDefault(log)
	}
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		res, err := renderOnce(ctx, repo, signer, o)
		log.Debug("phase", "name", "render and write", "took", time.Since(t0).Round(time.Millisecond))
		var ps schemas.Problems
		if errors.As(err, &ps) {
			return reportProblems(g, o, ps)
		}
		if errors.Is(err, gitrepo.ErrStale) && attempt < o.retries {
			log.Warn("another writer moved a ref; rendering again", "attempt", attempt+1, "error", err)
			continue
		}
		if err != nil {
			return err
		}
		for _, w := range res.Warnings {
			log.Warn(w)
		}
		var waves []*rollout.Waves
		if o.dryRun {
			waves, err = rolloutWaves(ctx, repo, res.Source, o.maxFileSize)
			if errors.As(err, &ps) {
				return reportProblems(g, o, ps)
			}
			if err != nil {
				return err
			}
		}
		t0 = time.Now()
		if err := printRender(g.Stdout, o, res, waves); err != nil {
			return err
		}
		log.Debug("phase", "name", "report", "took", time.Since(t0).Round(time.Millisecond))
		return reportFailed(g, res)
	}
}

// reportFailed names the installs that could not be rendered, with the
// problems of their files: the others were rendered and their refs moved,
// but the render exits non-zero.
func reportFailed(g *cli.Globals, res *renderer.Result) error {
	failed := res.Failed()
	if len(failed) == 0 {
		return nil
	}
	res.Problems.Sort()
	for _, p := range res.Problems {
		fmt.Fprintln(g.Stderr, p.String())
	}
	for _, in := range failed {
		if len(res.Problems) == 0 {
			fmt.Fprintf(g.Stderr, "install %s: %s\n", in.ID, in.Error)
		}
	}
	ids := make([]string, len(failed))
	for i, in := range failed {
		ids[i] = in.ID
	}
	fmt.Fprintf(g.Stderr, "nuon: %d install(s) not rendered, keeping their previous state: %s\n", len(failed), strings.Join(ids, ", "))
	return cli.ExitError{Code: 1}
}

func renderOnce(ctx context.Context, repo *gitrepo.Repo, signer *signature.Signer, o *renderOptions) (*renderer.Result, error) {
	return publish.Render(ctx, repo, signer, publish.Options{Source: o.source, DryRun: o.dryRun, Now: o.now, MaxFileSize: o.maxFileSize})
}

func reportProblems(g *cli.Globals, o *renderOptions, ps schemas.Problems) error {
	ps.Sort()
	if o.output == "json" {
		enc := json.NewEncoder(g.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(renderReport{DryRun: o.dryRun, Problems: ps, Installs: []renderer.InstallResult{}})
	}
	for _, p := range ps {
		fmt.Fprintln(g.Stderr, p.String())
	}
	fmt.Fprintf(g.Stderr, "nuon: %d problem(s) in the source; no ref moved\n", len(ps))
	return cli.ExitError{Code: 1}
}

// rolloutWaves assigns the waves of the channels of source that declare a
// rollout.
func rolloutWaves(ctx context.Context, repo *gitrepo.Repo, source plumbing.Hash, maxFileSize int64) ([]*rollout.Waves, error) {
	fsys, err := renderer.SourceFS(repo.Storer(), source)
	if err != nil {
		return nil, err
	}
	src, err := schemas.Open(fsys, schemas.WithMaxFileSize(maxFileSize))
	if err != nil {
		return nil, err
	}
	all, err := rollout.Load(ctx, fsys, src)
	if err != nil {
		return nil, err
	}
	var declared []*rollout.Waves
	for _, w := range all {
		if w.Declared {
			declared = append(declared, w)
		}
	}
	return declared, nil
}

func printRender(w io.Writer, o *renderOptions, res *renderer.Result, waves []*rollout.Waves) error {
	if o.output == "json" {
		rep := renderReport{Source: res.Source.String(), DryRun: o.dryRun, Changed: res.ChangedCount(), Installs: res.Installs, Problems: res.Problems, Warnings: res.Warnings, Rollouts: waves}
		if !res.Rendered.IsZero() && !o.dryRun {
			rep.Rendered = res.Rendered.String()
		}
		return writeReport(w, rep)
	}
	verb := "rendered"
	if o.dryRun {
		verb = "would render"
	}
	fmt.Fprintf(w, "%s %d of %d installs from %s\n", verb, res.ChangedCount(), res.Total, res.Source)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, in := range res.Installs {
		line := fmt.Sprintf("  %s\t%s", in.ID, in.Change)
		if !in.Commit.IsZero() && in.Change != renderer.Unchanged {
			line += fmt.Sprintf("\tgeneration %d", in.Generation)
			if !o.dryRun {
				line += "\tcommit " + in.Commit.String()[:12]
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if o.dryRun {
		printWaves(w, waves)
		for _, in := range res.Installs {
			if in.Diff != "" {
				fmt.Fprintf(w, "\n### install %s (%s, generation %d)\n%s", in.ID, in.Change, in.Generation, in.Diff)
			}
		}
		return nil
	}
	if res.Rendered.IsZero() {
		fmt.Fprintln(w, "nothing changed; no ref moved")
	} else {
		fmt.Fprintf(w, "%s → %s\n", plumbing.ReferenceName(schemas.RenderedRef), res.Rendered)
	}
	return nil
}

// writeReport writes rep as a json.Encoder indenting by two spaces does,
// but marshals its installs one at a time: at 1,000,000 installs the
// document is some 190 MB, and marshaled whole, into a buffer grown by
// doubling, it was the largest thing the render held at its end.
func writeReport(w io.Writer, rep renderReport) error {
	installs := rep.Installs
	if len(installs) > 0 {
		rep.Installs = []renderer.InstallResult{}
	}
	doc, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	const empty = "\n  \"installs\": []"
	i := bytes.Index(doc, []byte(empty))
	if i < 0 || len(installs) == 0 {
		_, err := w.Write(append(doc, '\n'))
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(doc[:i+len(empty)-1])
	// Blocks of installs are marshaled by a worker per CPU and written in
	// order, a few blocks ahead at most: marshaled one after the other, a
	// million installs took some 2.8 s of the render's end, one core idle.
	parts := make(chan chan reportPart, 2*runtime.GOMAXPROCS(0))
	go func() {
		defer close(parts)
		for lo := 0; lo < len(installs); lo += reportBlock {
			c := make(chan reportPart, 1)
			parts <- c
			go func() { c <- marshalInstalls(installs[lo:min(lo+reportBlock, len(installs))], lo == 0) }()
		}
	}()
	for c := range parts {
		p := <-c
		if p.err != nil {
			// The blocks still under way end, unread.
			go func() {
				for c := range parts {
					<-c
				}
			}()
			return p.err
		}
		bw.Write(p.data)
	}
	bw.WriteString("\n  ]")
	bw.Write(doc[i+len(empty):])
	bw.WriteByte('\n')
	return bw.Flush()
}

// reportBlock is the number of installs in a block of the report that a
// worker marshals.
const reportBlock = 4096

// reportPart is a block of installs marshaled, or why it could not be.
type reportPart struct {
	data []byte
	err  error
}

// marshalInstalls marshals installs as elements of the report's installs
// array, each after a comma but the report's first (first).
func marshalInstalls(installs []renderer.InstallResult, first bool) reportPart {
	var out []byte
	for k, in := range installs {
		data, err := json.MarshalIndent(in, "    ", "  ")
		if err != nil {
			return reportPart{err: err}
		}
		if k > 0 || !first {
			out = append(out, ',')
		}
		out = append(out, "\n    "...)
		out = append(out, data...)
	}
	return reportPart{data: out}
}

// printWaves shows each declared rollout's waves: which install is in
// which, in the order they would take a change.
func printWaves(w io.Writer, all []*rollout.Waves) {
	for _, ws := range all {
		fmt.Fprintf(w, "\nrollout of channel %s (enforced by the rollout controller in nuon server)\n", ws.Channel)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  WAVE\tNAME\tSIZE\tBAKE\tMIN HEALTHY\tBUDGET\tON FAILURE\tINSTALLS")
		for _, wave := range ws.Waves {
			ids := wave.Installs
			more := ""
			if len(ids) > 10 {
				ids, more = ids[:10], fmt.Sprintf(" and %d more", len(ids)-10)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%d\t%d\t%s\t%s%s\n", wave.Number, wave.Name, len(wave.Installs),
				wave.Bake, wave.MinHealthy, wave.FailureBudget, wave.OnFailure, strings.Join(ids, " "), more)
		}
		tw.Flush()
	}
}
