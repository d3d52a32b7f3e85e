package schemas

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// seedFiles adds to f the content of file in the test tenant and in every
// load case that changes it.
func seedFiles(f *testing.F, file string) {
	base := tenant(f)
	if b, ok := base[file]; ok {
		f.Add(b.Data)
	}
	cases := slices.Clone(loadCases)
	for _, tc := range sandboxCases {
		tc.edits = append(slices.Clone(withSandbox), tc.edits...)
		cases = append(cases, tc)
	}
	for _, tc := range cases {
		fsys := tenant(f)
		for _, e := range tc.edits {
			e(f, fsys)
		}
		for name, mf := range fsys {
			if b, ok := base[name]; ok && string(b.Data) == string(mf.Data) {
				continue
			}
			if strings.HasPrefix(name, "installs/") || name == file {
				f.Add(mf.Data)
			}
		}
	}
	for _, s := range []string{"", "---\n", "a: 1\n---\nb: 2\n", "a: &x [*x]\n", "<<: {channel: beta}\n", "? [a]\n: b\n", "\t", "{", "!!binary x: y\n"} {
		f.Add([]byte(s))
	}
}

// checkLoad loads fsys and checks that Load either succeeds or explains
// itself with located problems.
func checkLoad(t *testing.T, fsys fstest.MapFS) {
	_, err := Load(fsys)
	if err == nil {
		return
	}
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("Load: %v, want Problems", err)
	}
	if len(ps) == 0 {
		t.Fatal("Load returned no problems as an error")
	}
	for _, p := range ps {
		if p.File == "" || p.Line < 0 || p.Column < 0 || p.Message == "" {
			t.Errorf("problem without file, line or message: %#v", p)
		}
	}
}

func FuzzLoadInstall(f *testing.F) {
	seedFiles(f, "installs/acme.yaml")
	base := tenant(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := maps.Clone(base)
		fsys["installs/x.yaml"] = &fstest.MapFile{Data: data}
		checkLoad(t, fsys)
	})
}

func FuzzLoadApp(f *testing.F) {
	seedFiles(f, AppFile)
	base := tenant(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := maps.Clone(base)
		fsys[AppFile] = &fstest.MapFile{Data: data}
		checkLoad(t, fsys)
	})
}

func FuzzParseRefs(f *testing.F) {
	for _, s := range []string{
		"", "plain", "${install.id}", "shop-${install.id}", "$${install.id}", "$$${install.id}", "${", "${}", "}${",
		"${ install.id }", "${install.inputs.cidr}", "${components.network.outputs.vpc_id}", "${secrets.db_password}",
		"a${install.inputs.x}b${secrets.y}c", "${install.domain}", "${install.inputs.db_size", "${a${install.id}}",
		"${install.sandbox.outputs.registry.url}", "${install.sandbox.outputs.dns}", "${install.sandbox.outputs.registry.url}/${install.sandbox.outputs.registry.repository_prefix}/x",
		"${install.sandbox.outputs}", "${install.sandbox.outputs.a.b.c}", "${install.sandbox.outputs.registry.}", "${install.sandbox.registry.url}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		refs, err := ParseRefs(s)
		keep := func(Ref) (any, bool) { return nil, false }
		asWritten := func(r Ref) (any, bool) { return s[r.Start:r.End], true }
		got, serr := Substitute(s, keep)
		if (err == nil) != (serr == nil) {
			t.Fatalf("ParseRefs error %v, Substitute error %v", err, serr)
		}
		if err != nil {
			return
		}
		end := 0
		for _, r := range refs {
			if r.Start < end || r.Start >= r.End || r.End > len(s) {
				t.Fatalf("ref %+v out of order or out of %q", r, s)
			}
			end = r.End
			text := s[r.Start:r.End]
			if !strings.HasPrefix(text, "${") || !strings.HasSuffix(text, "}") {
				t.Fatalf("ref %+v spans %q, not ${…}", r, text)
			}
			again, err := ParseRefs("${" + r.String() + "}")
			if err != nil || len(again) != 1 || again[0].Kind != r.Kind || again[0].Name != r.Name || again[0].Output != r.Output {
				t.Fatalf("ref %+v prints as ${%s}, which parses as %+v, %v", r, r, again, err)
			}
		}
		if got != s {
			t.Fatalf("Substitute keeping every reference = %q, want %q", got, s)
		}
		if got, _ := Substitute(s, asWritten); got != s {
			t.Fatalf("Substitute with each reference as written = %q, want %q", got, s)
		}
	})
}

func FuzzValidateJSON(f *testing.F) {
	for _, v := range samples() {
		data, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{"", "{", "null", "[]", `{"id": 1,}`, `{"kind":"Job","generation":1.5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := ValidateJSON(SchemaJob, data)
		if err == nil {
			var j Job
			if err := json.Unmarshal(data, &j); err != nil {
				t.Fatalf("valid job manifest does not decode: %v", err)
			}
			return
		}
		var ps Problems
		if !errors.As(err, &ps) {
			t.Fatalf("ValidateJSON: %v, want Problems", err)
		}
		for _, p := range ps {
			if p.File == "" || p.Line < 0 || p.Column < 0 || p.Message == "" {
				t.Errorf("problem without file, line or message: %#v", p)
			}
		}
	})
}

func FuzzTrailers(f *testing.F) {
	f.Add("nuon: render acme\n\nNuon-Install: acme\nNuon-Generation: 7\nNuon-Expires: 2026-11-30T00:00:00Z\n")
	f.Add("x\n\nNuon-Generation: 007\n")
	f.Add("x\n\nNuon-Generation: 99999999999999999999\nNuon-Expires: tomorrow\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, msg string) {
		if g, err := Generation(msg); err == nil && g < 1 {
			t.Fatalf("generation %d accepted", g)
		}
		if e, ok, err := Expires(msg); err == nil && ok && e.Location() != time.UTC {
			t.Fatalf("expiry %v not in UTC", e)
		}
	})
}
