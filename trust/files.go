package trust

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// LoadFiles is Load over files, path to content, as read from a git tree
// (a rendered install's tree, or main's): only the files under Dir are
// read, and a tree with none gives no versions and no error.
func LoadFiles(files map[string][]byte) ([]*Root, error) {
	var fs []file
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasPrefix(name, Dir+"/") {
			// A file in a folder under Dir is refused as a stray file.
			fs = append(fs, file{name: name, data: files[name]})
		}
	}
	if len(fs) == 0 {
		return nil, nil
	}
	return load(fs)
}

// InForce is the version that judges a signature, given held, the newest
// version the verifier already trusts, and versions, those the signed
// thing carries: the newest version the chain reaches from held through
// versions (held itself when none is newer), not expired at now. A
// version newer than held is trusted only through the chain, so carrying
// it gives a signer nothing the root keys did not sign; versions older
// than held are ignored, so carrying an old root (a rollback) changes
// nothing. The error is a *StepError.
func InForce(held *Root, versions []*Root, now time.Time) (*Root, error) {
	return Chain(held, versions, now)
}

// Newest is the version with the highest number among roots, nil when
// there are none.
func Newest(roots []*Root) *Root {
	var n *Root
	for _, r := range roots {
		if n == nil || r.Version > n.Version {
			n = r
		}
	}
	return n
}

// First is version 1 among roots, nil when there is none.
func First(roots []*Root) *Root {
	for _, r := range roots {
		if r.Version == 1 {
			return r
		}
	}
	return nil
}
