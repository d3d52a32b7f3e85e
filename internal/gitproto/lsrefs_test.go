package gitproto

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

func TestLsRefs(t *testing.T) {
	f := newFixture(t, 1000)
	c := &Client{URL: f.url}
	first, second := f.commits[0], f.commits[1]
	tests := []struct {
		name     string
		prefixes []string
		want     map[plumbing.ReferenceName]plumbing.Hash
	}{
		{
			name:     "one ref among many",
			prefixes: []string{string(installRef(7))},
			want:     map[plumbing.ReferenceName]plumbing.Hash{installRef(7): second},
		},
		{
			name:     "missing ref",
			prefixes: []string{string(installRef(1000))},
			want:     map[plumbing.ReferenceName]plumbing.Hash{},
		},
		{
			name:     "several prefixes",
			prefixes: []string{string(installRef(0)), string(installRef(999)), "refs/tags/", "refs/heads/main"},
			want: map[plumbing.ReferenceName]plumbing.Hash{
				installRef(0):     first,
				installRef(999):   second,
				"refs/tags/v1":    first,
				"refs/heads/main": second,
			},
		},
		{
			name:     "every install",
			prefixes: []string{"refs/heads/nuon/installs/"},
			want:     allInstalls(1000, first, second),
		},
		{
			name:     "prefix is a plain string match",
			prefixes: []string{"refs/heads/nuon/installs/install-0012"},
			want: map[plumbing.ReferenceName]plumbing.Hash{
				installRef(120): first, installRef(121): second, installRef(122): first,
				installRef(123): second, installRef(124): first, installRef(125): second,
				installRef(126): first, installRef(127): second, installRef(128): first,
				installRef(129): second,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.srv.Reset()
			got, err := c.LsRefs(context.Background(), tt.prefixes...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("LsRefs(%q) (-want +got):\n%s", tt.prefixes, diff)
			}
			log := f.srv.Log()
			if len(log) != 1 || log[0].Method != "POST" || log[0].Path != "/tenant.git/git-upload-pack" {
				t.Errorf("requests = %+v, want one POST to git-upload-pack", log)
			}
			if max := int64(100 + 90*len(tt.want)); f.srv.Bytes() > max {
				t.Errorf("response is %d bytes, want at most %d", f.srv.Bytes(), max)
			}
		})
	}
}

func TestLsRefsAll(t *testing.T) {
	f := newFixture(t, 3)
	for _, prefixes := range [][]string{nil, {""}, {"refs/tags/", ""}} {
		got, err := (&Client{URL: f.url}).LsRefs(context.Background(), prefixes...)
		if err != nil {
			t.Fatal(err)
		}
		want := map[plumbing.ReferenceName]plumbing.Hash{
			installRef(0): f.commits[0], installRef(1): f.commits[1], installRef(2): f.commits[0],
			"HEAD": f.commits[1], "refs/heads/main": f.commits[1], "refs/tags/v1": f.commits[0],
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("LsRefs(%q) (-want +got):\n%s", prefixes, diff)
		}
	}
}

// TestLsRefsRequests pins the cost of a poll: one POST, with or without
// the capability GET the specification describes, which the server does
// not need.
func TestLsRefsRequests(t *testing.T) {
	f := newFixture(t, 10)
	ctx := context.Background()
	tests := []struct {
		name          string
		discover      bool
		first, steady []string
	}{
		{"direct", false, []string{"POST /tenant.git/git-upload-pack"}, []string{"POST /tenant.git/git-upload-pack"}},
		{"discover", true, []string{"GET /tenant.git/info/refs", "POST /tenant.git/git-upload-pack"}, []string{"POST /tenant.git/git-upload-pack"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{URL: f.url, Discover: tt.discover}
			for i, want := range [][]string{tt.first, tt.steady, tt.steady} {
				f.srv.Reset()
				refs, err := c.LsRefs(ctx, string(installRef(3)))
				if err != nil {
					t.Fatal(err)
				}
				if refs[installRef(3)] != f.commits[1] {
					t.Errorf("poll %d: %s = %s, want %s", i, installRef(3), refs[installRef(3)], f.commits[1])
				}
				var got []string
				for _, r := range f.srv.Log() {
					if r.Status != 200 {
						t.Errorf("poll %d: %s %s answered %d", i, r.Method, r.Path, r.Status)
					}
					got = append(got, r.Method+" "+r.Path)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("poll %d requests (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestLsRefsBadPrefix(t *testing.T) {
	c := &Client{URL: "http://127.0.0.1:1/r.git"}
	if _, err := c.LsRefs(context.Background(), "refs/heads/a\ncommand=fetch"); err == nil {
		t.Fatal("LsRefs accepted a prefix with a newline")
	}
}

func allInstalls(n int, even, odd plumbing.Hash) map[plumbing.ReferenceName]plumbing.Hash {
	m := map[plumbing.ReferenceName]plumbing.Hash{}
	for i := range n {
		m[installRef(i)] = even
		if i%2 == 1 {
			m[installRef(i)] = odd
		}
	}
	return m
}

func FuzzLsRefsResponse(f *testing.F) {
	oid := "4329ca2df7af90b855363f986aea5db6f0c01a9c"
	for _, seed := range []struct{ in, prefix string }{
		{pkt(oid+" refs/heads/main\n") + "0000", "refs/heads/"},
		{pkt(oid+" HEAD symref-target:refs/heads/main\n") + pkt(oid+" refs/tags/v1 peeled:"+oid+"\n") + "0000", ""},
		{pkt("unborn HEAD symref-target:refs/heads/main\n") + "0000", "HEAD"},
		{pkt(oid+" refs/heads/nuon/installs/a\n") + pkt(oid+" refs/heads/other\n") + "0000", "refs/heads/nuon/installs/"},
		{pkt("ERR no\n"), ""},
		{"0001", ""},
		{pkt(oid + "\n"), ""},
	} {
		f.Add([]byte(seed.in), seed.prefix)
	}
	f.Fuzz(func(t *testing.T, in []byte, prefix string) {
		refs, err := readLsRefs(newPktReader(bytes.NewReader(in)), []string{prefix})
		if err != nil {
			return
		}
		for name, h := range refs {
			if !strings.HasPrefix(string(name), prefix) || h.IsZero() || name == "" {
				t.Fatalf("ref %q = %s for prefix %q", name, h, prefix)
			}
		}
	})
}

// TestLsRefsConcurrent polls from several goroutines with one Client, the
// first of them racing to discover the capabilities.
func TestLsRefsConcurrent(t *testing.T) {
	f := newFixture(t, 20)
	c := &Client{URL: f.url, Discover: true}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			refs, err := c.LsRefs(context.Background(), string(installRef(i)))
			if err == nil && refs[installRef(i)] != f.commits[i%2] {
				err = fmt.Errorf("%s = %s, want %s", installRef(i), refs[installRef(i)], f.commits[i%2])
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
