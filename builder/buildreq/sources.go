package buildreq

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/schemas"
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
	allowed := sources.Components[r.Component]
	if len(allowed) == 0 {
		return fmt.Errorf("%w: build request %s: %s on main allows no source for component %q", ErrRefused, r.ID, schemas.BuildSourcesFile, r.Component)
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
		refErr = fmt.Errorf("%w: build request %s: component %q may be built from %s only at %s, not at ref %q (%s on main)", ErrRefused, r.ID, r.Component, r.Repository, strings.Join(src.Refs, ", "), r.Ref, schemas.BuildSourcesFile)
	}
	if refErr != nil {
		return refErr
	}
	return fmt.Errorf("%w: build request %s: component %q may not be built from %s: %s on main allows %s", ErrRefused, r.ID, r.Component, r.Repository, schemas.BuildSourcesFile, strings.Join(repos, ", "))
}
