package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"gopkg.in/yaml.v3"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/schemas"
)

// MainRef is the tenant repository's main branch.
const MainRef = plumbing.ReferenceName("refs/heads/main")

// ReviewRef is the branch installs/<id>.yaml goes to for review.
func ReviewRef(id string) plumbing.ReferenceName {
	return plumbing.NewBranchReferenceName("nuon/install/" + id)
}

// installFile is the content of installs/<id>.yaml.
func installFile(o *Options, pub string, outs *Outputs) ([]byte, error) {
	in := schemas.Install{
		Channel:  o.Channel,
		Inputs:   o.Inputs,
		Cloud:    schemas.Cloud{Provider: o.Cloud},
		Sandbox:  schemas.Sandbox{Name: o.Cloud},
		Registry: outs.Registry.URL + "/" + outs.Registry.RepositoryPrefix,
		AgentKey: pub,
	}
	if o.Cloud == CloudAWS {
		in.Sandbox.Name = "aws-eks"
	}
	var b bytes.Buffer
	b.WriteString("# Written by nuon install create: registry comes from the sandbox's\n# registry output, agentKey is the install's own public key.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(in); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// commitInstallFile writes installs/<id>.yaml as a commit on the review
// branch (from main when the branch is new) or on main.
func commitInstallFile(ctx context.Context, o *Options, st *state) (string, string, error) {
	outs := st.outputs
	if outs == nil {
		var err error
		if outs, err = readOutputs(o); err != nil {
			return "", "", fmt.Errorf("sandbox outputs: %w", err)
		}
	}
	content, err := installFile(o, st.publicKey, outs)
	if err != nil {
		return "", "", err
	}
	target := MainRef
	if !o.Commit {
		target = ReviewRef(o.ID)
	}
	file := path.Join(schemas.InstallsDir, o.ID+".yaml")
	repo, err := o.openRepo()
	if err != nil {
		return "", "", err
	}
	for attempt := 0; ; attempt++ {
		res, detail, err := commitOnce(ctx, o, repo, target, file, content)
		if errors.Is(err, gitrepo.ErrStale) && attempt < 5 {
			continue
		}
		return res, detail, err
	}
}

func commitOnce(ctx context.Context, o *Options, repo *gitrepo.Repo, target plumbing.ReferenceName, file string, content []byte) (string, string, error) {
	if err := repo.Fetch(ctx, "refs/heads/"); err != nil {
		return "", "", err
	}
	old, err := repo.Ref(target)
	if err != nil {
		return "", "", err
	}
	base := old
	if base.IsZero() {
		if base, err = repo.Ref(MainRef); err != nil {
			return "", "", err
		}
		if base.IsZero() {
			return "", "", fmt.Errorf("%s has no main branch", o.Repo)
		}
	}
	commit, err := repo.Git().CommitObject(base)
	if err != nil {
		return "", "", err
	}
	root, err := commit.Tree()
	if err != nil {
		return "", "", err
	}
	if f, err := root.File(file); err == nil {
		if s, err := f.Contents(); err == nil && s == string(content) {
			if !old.IsZero() {
				return Unchanged, target.Short() + " " + base.String()[:12], nil
			}
		}
	}
	b := gitobj.NewBatch()
	tree, err := setFile(b, root, file, content)
	if err != nil {
		return "", "", err
	}
	who := object.Signature{Name: o.AuthorName, Email: o.AuthorEmail, When: o.Now()}
	msg := fmt.Sprintf("%s: new install on channel %s (%s sandbox)\n\nWritten by nuon install create: the registry is the sandbox's registry\noutput, agentKey the install's own public key.\n", o.ID, o.Channel, o.Cloud)
	h, err := b.Commit(gitobj.Commit{Tree: tree, Parents: []plumbing.Hash{base}, Author: who, Message: msg}, nil)
	if err != nil {
		return "", "", err
	}
	if err := b.Flush(repo.Storer()); err != nil {
		return "", "", fmt.Errorf("write objects: %w", err)
	}
	if err := repo.Apply(ctx, []gitrepo.Update{{Name: target, Old: old, New: h}}); err != nil {
		return "", "", err
	}
	return Done, target.Short() + " " + h.String()[:12], nil
}

// setFile returns root with dir/base (one level deep) set to content.
func setFile(b *gitobj.Batch, root *object.Tree, file string, content []byte) (plumbing.Hash, error) {
	dir, base := path.Split(file)
	dir = strings.TrimSuffix(dir, "/")
	var sub []gitobj.Entry
	if t, err := root.Tree(dir); err == nil {
		sub = entries(t)
	}
	sub = setEntry(sub, gitobj.Entry{Name: base, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, content)})
	top := setEntry(entries(root), gitobj.Entry{Name: dir, Mode: filemode.Dir, Hash: b.Tree(sub)})
	return b.Tree(top), nil
}

func entries(t *object.Tree) []gitobj.Entry {
	out := make([]gitobj.Entry, 0, len(t.Entries))
	for _, e := range t.Entries {
		out = append(out, gitobj.Entry{Name: e.Name, Mode: e.Mode, Hash: e.Hash})
	}
	return out
}

func setEntry(es []gitobj.Entry, e gitobj.Entry) []gitobj.Entry {
	if i := slices.IndexFunc(es, func(x gitobj.Entry) bool { return x.Name == e.Name }); i >= 0 {
		es[i] = e
		return es
	}
	return append(es, e)
}
