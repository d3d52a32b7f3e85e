package trust

import (
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

// TestProvenanceRules: a root's provenance section parses into rules the
// agent asks by component and channel, and a bad one is refused at its
// field.
func TestProvenanceRules(t *testing.T) {
	builders := &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{
		{Name: "ci-1", Key: authorized(testKey(t, "ci-1"))},
		{Name: "ci-2", Key: authorized(testKey(t, "ci-2"))},
	}}
	good := &schemas.TrustProvenance{
		Sources: []schemas.TrustSource{
			{Component: "api", Repository: "git+https://x/shop", Ref: "refs/tags/v*"},
			{Component: "web-*", Repository: "git+https://x/web", Ref: "refs/heads/release"},
			{Component: "*", Repository: "git+https://x/mono", Ref: "refs/heads/main"},
		},
		Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable", "lts"}, Builders: 2}, {Channels: []string{"beta"}, Builders: 1}},
	}
	c := content(t, 1, 1, "root-a")
	c.Roles.Builders, c.Provenance = builders, good
	r := signedRoot(t, c, "root-a")
	if got := r.SourcesFor("api"); len(got) != 2 || got[0].Repository != "git+https://x/shop" || got[1].Repository != "git+https://x/mono" {
		t.Errorf("SourcesFor(api) = %v", got)
	}
	if got := r.SourcesFor("web-shop"); len(got) != 2 || got[0].Ref != "refs/heads/release" {
		t.Errorf("SourcesFor(web-shop) = %v", got)
	}
	if !Allows(r.SourcesFor("api"), "git+https://x/shop", "refs/tags/v1.0.0") || Allows(r.SourcesFor("api"), "git+https://x/web", "refs/heads/release") {
		t.Error("Allows: api may come from shop tags and not from web's release branch")
	}
	for ch, want := range map[string]int{"stable": 2, "lts": 2, "beta": 1, "": 1, "other": 1} {
		if got := r.BuildersFor(ch); got != want {
			t.Errorf("BuildersFor(%q) = %d, want %d", ch, got, want)
		}
	}
	if none := signedRoot(t, content(t, 1, 1, "root-a"), "root-a"); none.HasSources() || none.BuildersFor("stable") != 1 {
		t.Error("a root without a provenance section names no sources and requires one builder")
	}

	for _, tc := range []struct {
		name     string
		builders *schemas.TrustRole
		prov     *schemas.TrustProvenance
		want     string
	}{
		{"bad component glob", builders, &schemas.TrustProvenance{Sources: []schemas.TrustSource{{Component: "api[", Repository: "r", Ref: "x"}}},
			`signed.provenance.sources[0].component: component pattern "api["`},
		{"bad ref glob", builders, &schemas.TrustProvenance{Sources: []schemas.TrustSource{{Component: "api", Repository: "r", Ref: "refs/[v"}}},
			`signed.provenance.sources[0].ref: ref pattern "refs/[v"`},
		{"more builders than keys", builders, &schemas.TrustProvenance{Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 3}}},
			"signed.provenance.builders[0].builders: channels [stable] require 3 distinct builders, but the builders role has 2 keys"},
		{"builders without the role", nil, &schemas.TrustProvenance{Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}, Builders: 1}}},
			"but the root has no builders role"},
		{"no channels", builders, &schemas.TrustProvenance{Builders: []schemas.TrustBuilderRule{{Builders: 1}}}, "channels"},
		{"zero builders", builders, &schemas.TrustProvenance{Builders: []schemas.TrustBuilderRule{{Channels: []string{"stable"}}}}, "builders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := content(t, 1, 1, "root-a")
			c.Roles.Builders, c.Provenance = tc.builders, tc.prov
			b, err := Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse("trust/root/1.json", b)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "trust/root/1.json") {
				t.Fatalf("Parse: %v, want an error naming the file and %q", err, tc.want)
			}
		})
	}
}
