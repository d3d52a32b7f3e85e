package trust

import (
	"fmt"
	"path"
	"slices"
	"strconv"

	"nuon.dev/nuon/schemas"
)

// SourceRule allows artifacts of the components matching Component (a
// path.Match glob) to be built from Repository at a ref matching Ref (a
// glob too).
type SourceRule struct {
	Component, Repository, Ref string
}

// BuilderRule requires Builders distinct builder keys for an install on
// one of Channels.
type BuilderRule struct {
	Channels []string
	Builders int
}

// SourcesFor returns the rules whose component glob matches component;
// none when the root names no source for it. HasSources says whether the
// root names sources at all (else a verifier falls back to its own).
func (r *Root) SourcesFor(component string) []SourceRule {
	var out []SourceRule
	for _, s := range r.Sources {
		if ok, _ := path.Match(s.Component, component); ok {
			out = append(out, s)
		}
	}
	return out
}

// HasSources reports whether the root names allowed sources.
func (r *Root) HasSources() bool { return len(r.Sources) > 0 }

// BuildersFor is how many distinct builder keys must each have signed a
// matching provenance of an artifact an install on channel copies: the
// highest rule naming channel, 1 when none does.
func (r *Root) BuildersFor(channel string) int {
	n := 1
	for _, b := range r.BuilderRules {
		if slices.Contains(b.Channels, channel) && b.Builders > n {
			n = b.Builders
		}
	}
	return n
}

// Allows reports whether src (a repository and a ref) matches one of
// rules.
func Allows(rules []SourceRule, repository, ref string) bool {
	return slices.ContainsFunc(rules, func(s SourceRule) bool {
		ok, _ := path.Match(s.Ref, ref)
		return s.Repository == repository && ok
	})
}

// provenance checks the provenance section: globs that parse, and no
// channel requiring more builders than the builders role has keys.
func (p *parser) provenance(in *schemas.TrustProvenance, builders *RoleKeys) ([]SourceRule, []BuilderRule) {
	if in == nil {
		return nil, nil
	}
	var srcs []SourceRule
	for i, s := range in.Sources {
		field := "signed.provenance.sources[" + strconv.Itoa(i) + "]"
		if _, err := path.Match(s.Component, ""); err != nil {
			p.add(field+".component", "component pattern %q: %v", s.Component, err)
		}
		if _, err := path.Match(s.Ref, ""); err != nil {
			p.add(field+".ref", "ref pattern %q: %v", s.Ref, err)
		}
		srcs = append(srcs, SourceRule{Component: s.Component, Repository: s.Repository, Ref: s.Ref})
	}
	var rules []BuilderRule
	for i, b := range in.Builders {
		field := "signed.provenance.builders[" + strconv.Itoa(i) + "]"
		switch {
		case builders == nil:
			p.add(field+".builders", "channels %v require %d builders, but the root has no builders role", b.Channels, b.Builders)
		case b.Builders > len(builders.Keys):
			p.add(field+".builders", "channels %v require %d distinct builders, but the builders role has %d keys", b.Channels, b.Builders, len(builders.Keys))
		}
		rules = append(rules, BuilderRule{Channels: slices.Clone(b.Channels), Builders: b.Builders})
	}
	return srcs, rules
}

// String names the rule for messages.
func (s SourceRule) String() string {
	return fmt.Sprintf("%s from %s at %s", s.Component, s.Repository, s.Ref)
}
