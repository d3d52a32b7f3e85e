package trust

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	file := func(r *Root) *fstest.MapFile {
		b, err := r.Encoded()
		if err != nil {
			t.Fatal(err)
		}
		return &fstest.MapFile{Data: b}
	}
	v1 := signedRoot(t, content(t, 1, 1, "A"), "A")
	v2 := signedRoot(t, content(t, 2, 1, "A"), "A")
	good := fstest.MapFS{FileName(1): file(v1), FileName(2): file(v2)}
	roots, err := Load(good)
	if err != nil || len(roots) != 2 {
		t.Fatalf("Load: %d roots, %v", len(roots), err)
	}
	if newest, err := Chain(roots[0], roots, t0); err != nil || newest.Version != 2 {
		t.Fatalf("Chain over the loaded files: %v, %v", newest, err)
	}
	for _, tc := range []struct {
		name string
		fs   fstest.MapFS
		want string
	}{
		{name: "version differs from the name", fs: fstest.MapFS{FileName(1): file(v1), FileName(3): file(v2)},
			want: "trust/root/3.json: signed.version: file 3.json holds version 2"},
		{name: "stray file", fs: fstest.MapFS{FileName(1): file(v1), Dir + "/root.json": file(v2)},
			want: "trust/root/root.json: not a root version"},
		{name: "leading zero", fs: fstest.MapFS{Dir + "/01.json": file(v1)}, want: "01.json: not a root version"},
		{name: "no directory", fs: fstest.MapFS{}, want: "read trust/root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.fs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load: %v, want %q", err, tc.want)
			}
		})
	}
}
