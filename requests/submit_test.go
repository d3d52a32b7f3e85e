package requests

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/schemas"
)

// submission files r on parent with the acme fixture key and returns what
// the CLI sends the server.
func submission(t testing.TB, r *schemas.Request, parent plumbing.Hash) (schemas.SignedRequest, plumbing.Hash) {
	t.Helper()
	b := gitobj.NewBatch()
	h, err := File(b, r, parent, key(t, "acme"))
	if err != nil {
		t.Fatal(err)
	}
	_, raw, _ := b.Get(h)
	data, _ := json.MarshalIndent(r, "", "  ")
	return schemas.SignedRequest{File: string(data) + "\n", Commit: string(raw)}, h
}

// TestRebuild: a submission gives back the commit File made, byte for
// byte; a file that is not the one the commit's tree holds, a commit with
// two parents or no trailer is refused.
func TestRebuild(t *testing.T) {
	parent := plumbing.NewHash("1111111111111111111111111111111111111111")
	good, h := submission(t, request("r-1", "acme", "alice"), parent)
	o, err := Rebuild(good)
	if err != nil {
		t.Fatal(err)
	}
	if o.Commit != h || o.Parent != parent || o.Path != "requests/acme/r-1.json" || o.Batch.Len() != 5 {
		t.Errorf("rebuilt %s on %s at %s with %d objects, want %s on %s", o.Commit, o.Parent, o.Path, o.Batch.Len(), h, parent)
	}
	st := memory.NewStorage()
	if err := o.Batch.Flush(st); err != nil {
		t.Fatal(err)
	}
	if filed, err := FiledAt(st, h, o.Path); err != nil || !filed {
		t.Errorf("FiledAt = %v, %v", filed, err)
	}
	if filed, _ := FiledAt(st, h, "requests/acme/r-2.json"); filed {
		t.Error("r-2 filed")
	}
	twoParents := strings.Replace(good.Commit, "parent "+parent.String()+"\n", "parent "+parent.String()+"\nparent "+parent.String()+"\n", 1)
	for name, s := range map[string]schemas.SignedRequest{
		"file changed":   {File: strings.Replace(good.File, "acme", "acme ", 1), Commit: good.Commit},
		"two parents":    {File: good.File, Commit: twoParents},
		"no trailer":     {File: good.File, Commit: strings.Replace(good.Commit, TrailerRequest+":", "X-Other:", 1)},
		"path traversal": {File: good.File, Commit: strings.Replace(good.Commit, "requests/acme/r-1.json", "requests/../r-1.json", 1)},
		"not a commit":   {File: good.File, Commit: "tree nonsense"},
	} {
		if _, err := Rebuild(s); !errors.Is(err, schemas.ErrInvalidRequest) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzRebuild: any submission either rebuilds to a commit whose own tree
// holds exactly its file, or is refused; it never panics.
func FuzzRebuild(f *testing.F) {
	good, _ := submission(f, request("r-1", "acme", "alice"), plumbing.ZeroHash)
	f.Add(good.File, good.Commit)
	f.Add("", "")
	f.Add(good.File, strings.Replace(good.Commit, "r-1", "r-2", -1))
	f.Fuzz(func(t *testing.T, file, commit string) {
		o, err := Rebuild(schemas.SignedRequest{File: file, Commit: commit})
		if err != nil {
			return
		}
		st := memory.NewStorage()
		if err := o.Batch.Flush(st); err != nil {
			t.Fatal(err)
		}
		_, files, err := gitobj.ReadCommitFiles(st, o.Commit, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 1 || string(files[o.Path]) != file {
			t.Errorf("rebuilt tree holds %d files, %s differs", len(files), o.Path)
		}
	})
}
