package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/internal/gitobj"
)

// memSource is an objectSource over a batch in memory.
type memSource struct{ b *gitobj.Batch }

func (m memSource) info(h plumbing.Hash) (plumbing.ObjectType, int64, error) {
	t, data, ok := m.b.Get(h)
	if !ok {
		return plumbing.InvalidObject, 0, errNoObject
	}
	return t, int64(len(data)), nil
}

func (m memSource) read(h plumbing.Hash, limit int64) (plumbing.ObjectType, []byte, error) {
	t, data, ok := m.b.Get(h)
	if !ok {
		return plumbing.InvalidObject, nil, errNoObject
	}
	if int64(len(data)) > limit {
		return t, nil, errTooLarge
	}
	return t, data, nil
}

// graph is a repository in memory: an install's two refs, a chain of
// commits each, and objects of another install beside them.
type graph struct {
	src            memSource
	own            []ownRef
	chain          []plumbing.Hash // the status ref's commits, oldest first
	mine, outside  map[plumbing.Hash]bool
	outsideCommits []plumbing.Hash
}

func newGraph(t testing.TB, n int) *graph {
	b := gitobj.NewBatch()
	g := &graph{src: memSource{b}, mine: map[plumbing.Hash]bool{}, outside: map[plumbing.Hash]bool{}}
	commit := func(parent plumbing.Hash, i int, who string, files map[string]string, into map[plumbing.Hash]bool) plumbing.Hash {
		var entries []gitobj.Entry
		for name, content := range files {
			h := b.Add(plumbing.BlobObject, []byte(content))
			into[h] = true
			entries = append(entries, gitobj.Entry{Name: name, Mode: filemode.Regular, Hash: h})
		}
		sub := b.Tree([]gitobj.Entry{{Name: "shared", Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, []byte("shared "+who))}})
		into[sub] = true
		into[b.Add(plumbing.BlobObject, []byte("shared "+who))] = true
		entries = append(entries, gitobj.Entry{Name: "dir", Mode: filemode.Dir, Hash: sub})
		tree := b.Tree(entries)
		into[tree] = true
		var parents []plumbing.Hash
		if !parent.IsZero() {
			parents = append(parents, parent)
		}
		h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: parents, Message: fmt.Sprintf("%s %d\n", who, i),
			Author: object.Signature{Name: who, Email: who + "@x", When: time.Unix(int64(1e9+i*86400), 0)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		into[h] = true
		return h
	}
	var tip plumbing.Hash
	for i := range n {
		tip = commit(tip, i, "acme", map[string]string{"status.json": fmt.Sprint(i), "big": strings.Repeat("x", 100*i)}, g.mine)
		g.chain = append(g.chain, tip)
	}
	desired := commit(plumbing.ZeroHash, 0, "render", map[string]string{"install.json": "{}"}, g.mine)
	var other plumbing.Hash
	for i := range 3 {
		other = commit(other, i, "globex", map[string]string{"status.json": "globex secret " + fmt.Sprint(i)}, g.outside)
		g.outsideCommits = append(g.outsideCommits, other)
	}
	// A commit of the other install on top of acme's history: its parent
	// is acme's, its tree is not.
	g.outsideCommits = append(g.outsideCommits, commit(tip, 99, "globex", map[string]string{"x": "on top"}, g.outside))
	for h := range g.mine {
		delete(g.outside, h)
	}
	g.own = []ownRef{{"refs/heads/nuon/installs/acme", desired}, {"refs/heads/nuon/status/acme", tip}}
	return g
}

func TestPlanFetch(t *testing.T) {
	g := newGraph(t, 5)
	tip, desired := g.chain[4], g.own[0].hash
	tests := []struct {
		name    string
		args    []string
		err     string
		acks    []plumbing.Hash
		ready   bool
		pack    bool
		commits []plumbing.Hash
		shallow []plumbing.Hash
		unshall []plumbing.Hash
	}{
		{name: "clone", args: []string{"want " + tip.String(), "done"}, pack: true, commits: g.chain},
		{name: "update", args: []string{"want " + tip.String(), "have " + g.chain[2].String(), "done"}, pack: true, commits: g.chain[3:]},
		{name: "negotiate, ready", args: []string{"want " + tip.String(), "have " + g.chain[3].String()}, acks: g.chain[3:4], ready: true, pack: true, commits: g.chain[4:]},
		{name: "negotiate, another's have", args: []string{"want " + tip.String(), "have " + g.outsideCommits[3].String()}},
		{name: "want another's", args: []string{"want " + g.outsideCommits[0].String(), "done"}, err: "not our ref " + g.outsideCommits[0].String()},
		{name: "depth 2", args: []string{"want " + tip.String(), "deepen 2", "done"}, pack: true, commits: g.chain[3:], shallow: g.chain[3:4]},
		{name: "deepen relative", args: []string{"want " + tip.String(), "have " + tip.String(), "shallow " + g.chain[3].String(), "deepen 1", "deepen-relative", "done"},
			pack: true, commits: g.chain[2:3], shallow: g.chain[2:3], unshall: g.chain[3:4]},
		{name: "unshallow another's", args: []string{"want " + tip.String(), "shallow " + g.outsideCommits[3].String(), "deepen 2147483647", "done"}, pack: true, commits: g.chain},
		{name: "since", args: []string{"want " + tip.String(), fmt.Sprintf("deepen-since %d", int64(1e9+3*86400)), "done"}, pack: true, commits: g.chain[3:], shallow: g.chain[3:4]},
		{name: "deepen-not own", args: []string{"want " + desired.String(), "deepen-not refs/heads/nuon/status/acme", "done"}, pack: true, commits: []plumbing.Hash{desired}},
		{name: "deepen-not another's", args: []string{"want " + tip.String(), "deepen-not refs/heads/nuon/status/globex", "done"}, err: "ambiguous deepen-not"},
		{name: "nothing selected", args: []string{"want " + tip.String(), "deepen-not refs/heads/nuon/status/acme", "done"}, err: "no commits selected"},
		{name: "filter", args: []string{"want " + tip.String(), "filter tree:0", "done"}, err: "filter 'tree:0' is not served"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseFetchArgs(tt.args)
			var p *fetchPlan
			if err == nil {
				p, err = planFetch(g.src, g.own, a)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.acks, tt.acks) || p.ready != tt.ready || p.pack != tt.pack {
				t.Fatalf("acks %v ready %v pack %v, want %v %v %v", p.acks, p.ready, p.pack, tt.acks, tt.ready, tt.pack)
			}
			var commits []plumbing.Hash
			for _, o := range p.objects {
				if !g.mine[o.hash] {
					t.Errorf("packs %s, not acme's", o.hash)
				}
				if tp, _, _ := g.src.info(o.hash); tp == plumbing.CommitObject {
					commits = append(commits, o.hash)
				}
			}
			plumbing.HashesSort(commits)
			want := slices.Clone(tt.commits)
			plumbing.HashesSort(want)
			if !slices.Equal(commits, want) {
				t.Errorf("commits %v, want %v", commits, want)
			}
			if !slices.Equal(p.shallow, tt.shallow) || !slices.Equal(p.unshallow, tt.unshall) {
				t.Errorf("shallow %v unshallow %v, want %v %v", p.shallow, p.unshallow, tt.shallow, tt.unshall)
			}
		})
	}
}

// TestPlanFetchUpdateSendsOnlyNew: the agent's fetch of a new status
// packs the new commit, its tree and the blob that changed, not what the
// have's tree holds.
func TestPlanFetchUpdateSendsOnlyNew(t *testing.T) {
	g := newGraph(t, 3)
	a, _ := parseFetchArgs([]string{"want " + g.chain[2].String(), "have " + g.chain[1].String(), "done"})
	p, err := planFetch(g.src, g.own, a)
	if err != nil {
		t.Fatal(err)
	}
	// commit, root tree, status.json, big; dir/ is the same tree.
	if len(p.objects) != 4 {
		t.Fatalf("packs %d objects, want 4: %v", len(p.objects), p.objects)
	}
}

func TestParseCommit(t *testing.T) {
	tree, parent := strings.Repeat("a", 40), strings.Repeat("b", 40)
	tests := []struct {
		name, in string
		want     *commitInfo
		err      string
	}{
		{name: "root", in: "tree " + tree + "\nauthor a <a> 1 +0000\ncommitter c <c> 1700000000 +0100\n\nmsg\nparent " + parent + "\n",
			want: &commitInfo{tree: plumbing.NewHash(tree), time: 1700000000}},
		{name: "parents", in: "tree " + tree + "\nparent " + parent + "\nparent " + tree + "\ncommitter c d <c@x> 5 -0700\ngpgsig x\n y\n\n",
			want: &commitInfo{tree: plumbing.NewHash(tree), parents: []plumbing.Hash{plumbing.NewHash(parent), plumbing.NewHash(tree)}, time: 5}},
		{name: "no tree", in: "committer c <c> 1 +0000\n", err: "no tree"},
		{name: "two trees", in: "tree " + tree + "\ntree " + tree + "\n", err: "two trees"},
		{name: "bad parent", in: "tree " + tree + "\nparent xyz\n", err: "bad parent"},
		{name: "upper-case id", in: "tree " + strings.ToUpper(tree) + "\n", err: "bad tree"},
		{name: "no committer", in: "tree " + tree + "\n\n", err: "no committer"},
		{name: "bad time", in: "tree " + tree + "\ncommitter c <c> soon +0000\n", err: "bad committer time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCommit([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.tree != tt.want.tree || got.time != tt.want.time || !slices.Equal(got.parents, tt.want.parents) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseCommit: never a panic; what parses has a tree.
func FuzzParseCommit(f *testing.F) {
	tree := strings.Repeat("a", 40)
	for _, s := range []string{"", "tree " + tree + "\ncommitter c <c> 1 +0000\n", "tree " + tree + "\nparent " + tree + "\ncommitter <> 1\n\nm", "committer >", "tree \n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ci, err := parseCommit(data)
		if err == nil && ci.tree.IsZero() && !strings.HasPrefix(string(data), "tree "+strings.Repeat("0", 40)) {
			t.Fatal("parsed a commit without a tree")
		}
	})
}

// FuzzEachEntry: never a panic; every entry read has a name and a mode.
func FuzzEachEntry(f *testing.F) {
	good := gitobj.EncodeTree([]gitobj.Entry{{Name: "a", Mode: filemode.Regular, Hash: plumbing.NewHash(strings.Repeat("1", 40))}, {Name: "d", Mode: filemode.Dir}})
	for _, s := range [][]byte{nil, good, good[:10], []byte("40000 x\x00"), []byte(" \x00")} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = eachEntry(data, func(mode filemode.FileMode, name []byte, _ plumbing.Hash) error {
			if len(name) == 0 {
				t.Fatal("entry without a name")
			}
			return nil
		})
	})
}

// FuzzPlanFetch: whatever the argument lines, a fetch planned for acme
// packs only acme's objects, and an error or an answer never names an
// object of another install that the request did not name itself.
func FuzzPlanFetch(f *testing.F) {
	g := newGraph(f, 4)
	ids := []plumbing.Hash{g.chain[0], g.chain[3], g.own[0].hash, g.outsideCommits[0], g.outsideCommits[3]}
	for o := range g.outside {
		ids = append(ids, o)
		break
	}
	f.Add("want 0\nhave 1\ndone", []byte{0, 1, 2, 3})
	f.Add("want 0\nshallow 3\ndeepen 2147483647\ndone", []byte{1, 4})
	f.Add("want 1\nhave 4\nfilter blob:none", []byte{4, 3})
	f.Add("want 0\ndeepen 1\ndeepen-relative\nshallow 2\nhave 0", []byte{1, 1, 1})
	f.Add("want-ref refs/heads/nuon/status/acme\ndeepen-since 1000086400\ndone", []byte{})
	f.Fuzz(func(t *testing.T, script string, picks []byte) {
		// Digits in the script stand for object ids, chosen by picks.
		var lines []string
		for i, l := range strings.Split(script, "\n") {
			if verb, arg, ok := strings.Cut(l, " "); ok && len(arg) == 1 && arg[0] >= '0' && arg[0] <= '9' {
				k := int(arg[0] - '0')
				if i < len(picks) {
					k += int(picks[i])
				}
				l = verb + " " + ids[k%len(ids)].String()
			}
			lines = append(lines, l)
		}
		if len(lines) > 64 {
			return
		}
		a, err := parseFetchArgs(lines)
		if err != nil {
			return
		}
		p, err := planFetch(g.src, g.own, a)
		named := strings.Join(lines, "\n")
		if err != nil {
			for o := range g.outside {
				if strings.Contains(err.Error(), o.String()) && !strings.Contains(named, o.String()) {
					t.Fatalf("error names %s: %v", o, err)
				}
			}
			return
		}
		for _, o := range p.objects {
			if !g.mine[o.hash] {
				t.Fatalf("packs %s, outside the closure", o.hash)
			}
		}
		for _, l := range [][]plumbing.Hash{p.acks, p.shallow, p.unshallow} {
			for _, h := range l {
				if !g.mine[h] {
					t.Fatalf("answers with %s, outside the closure", h)
				}
			}
		}
	})
}

// FuzzParseFetchArgs: never a panic; what parses is within the bounds and
// never asks for deepen together with deepen-since or deepen-not.
func FuzzParseFetchArgs(f *testing.F) {
	h := strings.Repeat("a", 40)
	for _, s := range []string{"want " + h + "\ndone", "deepen 3\ndeepen-relative", "deepen-since 1\ndeepen-not main", "filter blob:limit=10k", "filter blob:limit=-1", "have x", "done extra", "deepen 0", "deepen 2147483648"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseFetchArgs(strings.Split(s, "\n"))
		if err != nil {
			return
		}
		if len(a.wants) > maxFetchWants || len(a.haves) > maxFetchHaves || len(a.shallows) > maxFetchHaves || len(a.wantRefs) > 2 || len(a.deepenNot) > 2 {
			t.Fatalf("over the bounds: %+v", a)
		}
		if a.depth > 0 && (a.since != 0 || len(a.deepenNot) > 0) || a.depth < 0 || a.filter.blobLimit < 0 {
			t.Fatalf("inconsistent: %+v", a)
		}
	})
}
