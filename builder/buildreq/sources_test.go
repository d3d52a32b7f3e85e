package buildreq_test

import (
	"errors"
	"testing"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/internal/trusttest"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// TestMainSources: the sources a build may come from are the trust root's
// provenance sources when main's root names any — the rules the install
// agents hold the artifact's provenance to — and trust/build-sources.yaml
// only without them; with neither, nothing is built.
func TestMainSources(t *testing.T) {
	now := time.Now()
	v := trusttest.Version{Version: 1, Expires: now.Add(24 * time.Hour), RootKeys: []string{"root-a"}, Threshold: 1,
		Render: []trusttest.RenderKey{{Name: "render"}}, Builders: []trusttest.NamedKey{{Name: "ci", Key: trusttest.Key(t, "ci").AuthorizedKey()}}}
	c := v.Content(t)
	c.Provenance = &schemas.TrustProvenance{Sources: []schemas.TrustSource{
		{Component: "api", Repository: "https://git.example/shop", Ref: "refs/tags/v*"},
		{Component: "web-*", Repository: "https://git.example/web", Ref: "refs/heads/main"},
	}}
	root := trusttest.Sign(t, c, "root-a")
	legacy := []byte("components:\n  api:\n    - repository: https://git.example/elsewhere\n")
	req := func(component, repo, ref string) *schemas.BuildRequest {
		return &schemas.BuildRequest{ID: "b1", Component: component, Repository: repo, Ref: ref}
	}
	for _, tc := range []struct {
		name  string
		main  trust.Files
		req   *schemas.BuildRequest
		allow bool
	}{
		{"root: api from its tags", trust.Files{trust.FileName(1): root}, req("api", "https://git.example/shop", "refs/tags/v1.2.0"), true},
		{"root: api from a branch", trust.Files{trust.FileName(1): root}, req("api", "https://git.example/shop", "refs/heads/main"), false},
		{"root: a glob names web-shop", trust.Files{trust.FileName(1): root}, req("web-shop", "https://git.example/web", "refs/heads/main"), true},
		{"root: another repository", trust.Files{trust.FileName(1): root}, req("api", "https://git.example/elsewhere", "refs/tags/v1"), false},
		{"root wins over the file", trust.Files{trust.FileName(1): root, schemas.BuildSourcesFile: legacy}, req("api", "https://git.example/elsewhere", ""), false},
		{"root: a component it does not name", trust.Files{trust.FileName(1): root}, req("db", "https://git.example/shop", "refs/tags/v1"), false},
		{"file without a root", trust.Files{schemas.BuildSourcesFile: legacy}, req("api", "https://git.example/elsewhere", ""), true},
		{"neither", trust.Files{}, req("api", "https://git.example/shop", "refs/tags/v1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := buildreq.MainSources(tc.main, now)
			if err != nil {
				t.Fatal(err)
			}
			err = buildreq.CheckSource(s, tc.req)
			if tc.allow != (err == nil) {
				t.Fatalf("allowed = %v, want %v (%v)", err == nil, tc.allow, err)
			}
			if err != nil && !errors.Is(err, buildreq.ErrRefused) {
				t.Errorf("not ErrRefused: %v", err)
			}
		})
	}
}
