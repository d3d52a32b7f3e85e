package cli

import (
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

func newTrustAllowSourceCmd(g *Globals, o *trustOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "allow-source COMPONENT REPOSITORY REF",
		Short: "Allow a component's artifacts to be built from a repository and ref, in the next version",
		Long: `The root's provenance.sources name, per component (a glob), the source
repositories and refs its artifacts' SLSA provenance may name. Once the root
names any source, an agent copies an artifact only when its provenance comes
from a source allowed for its component (the agent's --provenance-source
flags are then ignored); a component no source matches gets no artifact.`,
		Example: `  nuon trust allow-source api git+https://git.example.com/acme/shop 'refs/tags/v*'
  nuon trust allow-source 'web-*' git+https://git.example.com/acme/web refs/heads/release`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			s := schemas.TrustSource{Component: args[0], Repository: args[1], Ref: args[2]}
			for _, p := range []string{s.Component, s.Ref} {
				if _, err := path.Match(p, ""); err != nil {
					return fmt.Errorf("trust allow-source: pattern %q: %w", p, err)
				}
			}
			c, err := draft(o)
			if err != nil {
				return err
			}
			if c.Provenance == nil {
				c.Provenance = &schemas.TrustProvenance{}
			}
			first := len(c.Provenance.Sources) == 0
			if slices.Contains(c.Provenance.Sources, s) {
				return fmt.Errorf("trust allow-source: %s from %s at %s is already allowed", s.Component, s.Repository, s.Ref)
			}
			c.Provenance.Sources = append(c.Provenance.Sources, s)
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version %d (draft)\n", r.File, r.Version)
			fmt.Fprintf(g.Stdout, "lets: artifacts of components matching %s, built from %s at refs matching %s\n", s.Component, s.Repository, s.Ref)
			if first {
				fmt.Fprintln(g.Stdout, "stops: every artifact whose provenance names no source the root allows for its component; agents' --provenance-source flags no longer count")
				if r.Role(trust.RoleBuilders) == nil {
					fmt.Fprintln(g.Stdout, "stops: every artifact, until a builders key is added (nuon trust add-key builders NAME FILE.pub): no provenance can be trusted")
				}
			}
			return printNeeds(g.Stdout, o, r)
		},
	}
}

func newTrustRequireBuildersCmd(g *Globals, o *trustOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "require-builders CHANNEL N",
		Short: "Require N distinct builders' provenance for each artifact of a channel, in the next version",
		Long: `An install on CHANNEL copies an artifact only when N distinct keys of the
builders role have each signed a provenance of its digest that passes
(independent reproducible builds of one digest). Two attestations by one
builder count once. N may not exceed the builders role's keys.`,
		Example: `  nuon trust require-builders stable 2`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("trust require-builders: N %q: want a number of builders, 1 or more", args[1])
			}
			c, err := draft(o)
			if err != nil {
				return err
			}
			if c.Provenance == nil {
				c.Provenance = &schemas.TrustProvenance{}
			}
			was := 1
			rules := c.Provenance.Builders[:0:0]
			for _, b := range c.Provenance.Builders {
				if i := slices.Index(b.Channels, args[0]); i >= 0 {
					was = max(was, b.Builders)
					b.Channels = slices.Delete(slices.Clone(b.Channels), i, i+1)
				}
				if len(b.Channels) > 0 {
					rules = append(rules, b)
				}
			}
			c.Provenance.Builders = append(rules, schemas.TrustBuilderRule{Channels: []string{args[0]}, Builders: n})
			r, err := writeVersion(o, c)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.Stdout, "wrote %s: version %d (draft)\n", r.File, r.Version)
			printBuilders(g.Stdout, args[0], was, n)
			if !r.HasSources() {
				fmt.Fprintln(g.Stdout, "stops: every artifact of agents given no --provenance-source, since the root names no source (nuon trust allow-source COMPONENT REPO REF)")
			}
			return printNeeds(g.Stdout, o, r)
		},
	}
}

func printBuilders(w io.Writer, channel string, was, n int) {
	switch {
	case n > was:
		fmt.Fprintf(w, "stops: artifacts for channel %s with provenance from fewer than %d distinct builders (was %d)\n", channel, n, was)
	case n < was:
		fmt.Fprintf(w, "lets: artifacts for channel %s with provenance from %d distinct builders (was %d)\n", channel, n, was)
	default:
		fmt.Fprintf(w, "keeps: channel %s requires %d distinct builders\n", channel, n)
	}
}

// printProvenance lists r's provenance rules, for nuon trust verify.
func printProvenance(w io.Writer, r *trust.Root) {
	for _, s := range r.Sources {
		fmt.Fprintf(w, "  source           %s\n", s)
	}
	for _, b := range r.BuilderRules {
		fmt.Fprintf(w, "  builders         %d distinct for channels %v\n", b.Builders, b.Channels)
	}
}
