package schemas

import (
	"path"
	"strings"
)

// Split separates problems confined to one install's file
// (installs/<id>.yaml), by install id, from the others. An install's
// problems stop only that install; any other problem (nuon.yaml, a
// channel, a release) concerns every install.
func (ps Problems) Split() (installs map[string]Problems, rest Problems) {
	installs = map[string]Problems{}
	for _, p := range ps {
		dir, file := path.Split(p.File)
		id, ok := strings.CutSuffix(file, ".yaml")
		if dir != InstallsDir+"/" || !ok || !labelRE.MatchString(id) {
			rest = append(rest, p)
			continue
		}
		installs[id] = append(installs[id], p)
	}
	return installs, rest
}

// Without returns the source less the installs ids: what a render can
// still do when those installs' files have problems.
func (s *Source) Without(ids map[string]Problems) *Source {
	if len(ids) == 0 {
		return s
	}
	out := *s
	out.Installs = make(map[string]Install, len(s.Installs))
	for id, in := range s.Installs {
		if _, bad := ids[id]; !bad {
			out.Installs[id] = in
		}
	}
	return &out
}
