package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// resolveRefs resolves the refs names of the repository at dir to the
// commits they name, as revParse resolves each, with one git for-each-ref
// where a check of main ran git rev-parse for main, the requests and the
// approvals each (some 2 ms of CPU a process, at every check of main). A
// ref that is not there is not in the map; one that names no commit
// directly or through a tag is resolved by revParse, and left out when
// revParse fails (as a check of main took a failed rev-parse of the
// requests for none filed).
func resolveRefs(ctx context.Context, dir string, names ...string) (map[string]plumbing.Hash, error) {
	out, err := gitOutput(ctx, dir, nil, append([]string{"for-each-ref", "--format=%(objecttype) %(objectname) %(*objecttype) %(*objectname) %(refname)"}, names...)...)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", strings.Join(names, ", "), err)
	}
	found, other := parseResolved(string(out), names)
	for _, name := range other {
		if h, err := revParse(ctx, dir, name); err == nil {
			found[name] = h
		}
	}
	return found, nil
}

// parseResolved reads the lines of resolveRefs's for-each-ref: for each
// of names, the commit it names (a tag's when it is a tag of a commit),
// and the names that are there but name something else. Lines of other
// refs (for-each-ref matches the refs under a name too) and lines it
// cannot read are left out.
func parseResolved(out string, names []string) (map[string]plumbing.Hash, []string) {
	found := map[string]plumbing.Hash{}
	var other []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		var name, typ, id string
		switch len(f) {
		case 3: // not a tag: the peeled fields are empty
			typ, id, name = f[0], f[1], f[2]
		case 5:
			typ, id, name = f[2], f[3], f[4]
			if f[0] != "tag" {
				typ = ""
			}
		default:
			continue
		}
		if !slices.Contains(names, name) {
			continue
		}
		if _, ok := found[name]; ok || slices.Contains(other, name) {
			continue
		}
		if typ != "commit" || !plumbing.IsHash(id) {
			other = append(other, name)
			continue
		}
		found[name] = plumbing.NewHash(id)
	}
	return found, other
}
