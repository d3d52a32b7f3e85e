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
	"nuon.dev/nuon/sandboxes"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/stack"
)

// MainRef is the tenant repository's main branch.
const MainRef = plumbing.ReferenceName("refs/heads/main")

// ReviewRef is the branch installs/<id>.yaml goes to for review.
func ReviewRef(id string) plumbing.ReferenceName {
	return plumbing.NewBranchReferenceName("nuon/install/" + id)
}

// installFile is the content of installs/<id>.yaml. When the app
// declares a sandbox (managed), the file names it and gives it this
// install's inputs, and its registry is left to the sandbox's registry
// output, which the agent reads: the hand-over. Otherwise the registry is
// copied from the outputs, as before there were managed sandboxes.
func installFile(o *Options, pub string, outs *Outputs, managed bool) ([]byte, error) {
	in := schemas.Install{
		Channel:  o.Channel,
		Inputs:   o.Inputs,
		Cloud:    schemas.Cloud{Provider: o.Cloud},
		Sandbox:  schemas.Sandbox{Name: sandboxes.Local},
		AgentKey: pub,
	}
	if o.Cloud == CloudAWS {
		in.Sandbox.Name = sandboxes.AWSEKS
	}
	var b bytes.Buffer
	if !managed {
		in.Registry = outs.Registry.URL + "/" + outs.Registry.RepositoryPrefix
		b.WriteString("# Written by nuon install create: registry comes from the sandbox's\n# registry output, agentKey is the install's own public key.\n")
	} else {
		in.Sandbox.Inputs = o.sandboxInputs()
		if o.Cloud == CloudAWS {
			in.Sandbox.Role = &schemas.SandboxRole{ARN: o.roleARN(stack.Maintenance), ExternalID: o.AWS.ExternalID}
			in.Sandbox.State = o.sandboxState()
		}
		b.WriteString("# Written by nuon install create. The sandbox is managed by the install's\n# agent from here on: its version is the channel's pin, its outputs (the\n# registry among them) reach components as ${install.sandbox.outputs.…}.\n# agentKey is the install's own public key.\n")
	}
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
	content := func(app []byte) ([]byte, error) {
		return installFile(o, st.publicKey, outs, managedSandbox(app))
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

// managedSandbox tells whether an app file (nuon.yaml) declares a
// sandbox, which its installs' agents then manage.
func managedSandbox(app []byte) bool {
	var a struct {
		Sandbox *schemas.AppSandbox `yaml:"sandbox"`
	}
	return yaml.Unmarshal(app, &a) == nil && a.Sandbox != nil
}

// sandboxInputs are the sandbox module's variables that are this
// install's own (install_id comes from the renderer): the same values the
// sandbox phase applied with, so that the agent's first apply changes
// nothing. The local sandbox's inputs are paths of this machine, which
// belong in no git repository: the agent gets them as flags instead
// (agentSandboxInputs), and the install file names none.
func (o *Options) sandboxInputs() map[string]any {
	if o.Cloud == CloudAWS {
		zones := make([]any, len(o.AWS.AvailabilityZones))
		for i, z := range o.AWS.AvailabilityZones {
			zones[i] = z
		}
		return map[string]any{"region": o.AWS.Region, "availability_zones": zones, "domain": o.AWS.Domain,
			"maintenance_role_arn": o.roleARN(stack.Maintenance)}
	}
	return nil
}

// agentSandboxInputs are the agent's --sandbox-input flags: the local
// sandbox's machine paths, as the sandbox phase applied it with.
func (o *Options) agentSandboxInputs() []string {
	if o.Cloud == CloudAWS {
		return nil
	}
	return []string{"--sandbox-input", "dir=" + o.path(RuntimeDir), "--sandbox-input", "kube_assets=" + o.KubeAssets}
}

func commitOnce(ctx context.Context, o *Options, repo *gitrepo.Repo, target plumbing.ReferenceName, file string, contentFor func(app []byte) ([]byte, error)) (string, string, error) {
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
	var app []byte
	if f, err := root.File(schemas.AppFile); err == nil {
		if s, err := f.Contents(); err == nil {
			app = []byte(s)
		}
	}
	content, err := contentFor(app)
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
