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
