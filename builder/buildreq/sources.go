package buildreq

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// ParseSources reads schemas.BuildSourcesFile: strict YAML (an unknown
// key is an error), every repository named, every ref pattern valid.
func ParseSources(data []byte) (*schemas.BuildSources, error) {
	var s schemas.BuildSources
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", schemas.BuildSourcesFile, err)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Components)) {
		for i, src := range s.Components[name] {
			where := fmt.Sprintf("%s: components.%s[%d]", schemas.BuildSourcesFile, name, i)
			if strings.TrimSpace(src.Repository) == "" {
				return nil, fmt.Errorf("%s: repository is required", where)
			}
			for _, ref := range src.Refs {
				if _, err := path.Match(ref, "refs/heads/main"); err != nil || !strings.HasPrefix(ref, "refs/") {
					return nil, fmt.Errorf("%s: ref %q: want a ref name or pattern under refs/ (refs/tags/v*)", where, ref)
				}
			}
		}
	}
	return &s, nil
}

// CheckSource refuses (ErrRefused) a request whose repository, or ref,
// main does not allow for its component (sources nil: the file is
// missing, nothing is allowed). It judges the names only: the build agent
// also checks that the commit is reachable from the ref.
func CheckSource(sources *schemas.BuildSources, r *schemas.BuildRequest) error {
	if sources == nil {
		return fmt.Errorf("%w: build request %s: main has no %s: no component may be built from any source until it names them", ErrRefused, r.ID, schemas.BuildSourcesFile)
	}
	allowed := sources.For(r.Component)
	if len(allowed) == 0 {
		return fmt.Errorf("%w: build request %s: %s on main allows no source for component %q", ErrRefused, r.ID, sources.Where(), r.Component)
	}
	var repos []string
	var refErr error
	for _, src := range allowed {
		repos = append(repos, src.Repository)
		if strings.TrimSuffix(src.Repository, "/") != strings.TrimSuffix(r.Repository, "/") {
			continue
		}
		if len(src.Refs) == 0 {
			return nil
		}
		for _, p := range src.Refs {
			if ok, _ := path.Match(p, r.Ref); ok && r.Ref != "" {
				return nil
			}
		}
		refErr = fmt.Errorf("%w: build request %s: component %q may be built from %s only at %s, not at ref %q (%s on main)", ErrRefused, r.ID, r.Component, r.Repository, strings.Join(src.Refs, ", "), r.Ref, sources.Where())
	}
	if refErr != nil {
		return refErr
	}
	return fmt.Errorf("%w: build request %s: component %q may not be built from %s: %s on main allows %s", ErrRefused, r.ID, r.Component, r.Repository, sources.Where(), strings.Join(repos, ", "))
}

// MainSources returns the sources main allows builds from, at now: the
// trust root's provenance sources when main's root names any (the same
// rules the install agents hold artifacts' provenance to, so a build is
// refused exactly where its artifact would be), else
// schemas.BuildSourcesFile (nil when main has neither: nothing is
// allowed). The server and the build agent both read them here.
func MainSources(m trust.Main, now time.Time) (*schemas.BuildSources, error) {
	root, err := trust.MainRoot(m, now)
	if err != nil {
		return nil, err
	}
	if root != nil && root.HasSources() {
		s := &schemas.BuildSources{Components: map[string][]schemas.BuildSource{}}
		for _, r := range root.Sources {
			src := schemas.BuildSource{Repository: r.Repository}
			if r.Ref != "" {
				src.Refs = []string{r.Ref}
			}
			s.Components[r.Component] = append(s.Components[r.Component], src)
		}
		s.From = root.File
		return s, nil
	}
	data, err := m.ReadFile(schemas.BuildSourcesFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseSources(data)
}
