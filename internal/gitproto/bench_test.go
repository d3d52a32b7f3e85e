package gitproto

import (
	"context"
	"fmt"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"nuon.dev/nuon/internal/gittest"
)

// BenchmarkLsRefsPoll measures one install's poll for its ref in
// repositories with 1, 1,000 and 10,000 install refs, at the server:
// requests and response bytes per poll. ls-refs is this package; go-git-list
// is go-git v5's Remote.List, which gets the protocol version 0
// advertisement of every ref, for comparison.
func BenchmarkLsRefsPoll(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 1000, 10000} {
		b.Run(fmt.Sprintf("refs=%d", n), func(b *testing.B) {
			f := newFixture(b, n)
			ref := installRef(n / 2)
			want := f.commits[(n/2)%2]
			b.Run("ls-refs", func(b *testing.B) {
				c := &Client{URL: f.url}
				measurePolls(b, f.srv, func() (plumbing.Hash, error) {
					refs, err := c.LsRefs(ctx, string(ref))
					return refs[ref], err
				}, want)
			})
			b.Run("go-git-list", func(b *testing.B) {
				remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{f.url}})
				measurePolls(b, f.srv, func() (plumbing.Hash, error) {
					refs, err := remote.ListContext(ctx, &git.ListOptions{})
					for _, r := range refs {
						if r.Name() == ref {
							return r.Hash(), err
						}
					}
					return plumbing.ZeroHash, err
				}, want)
			})
		})
	}
}

// measurePolls runs poll in a b.Loop and reports the requests and response
// bytes the server counted per poll.
func measurePolls(b *testing.B, srv *gittest.Server, poll func() (plumbing.Hash, error), want plumbing.Hash) {
	srv.Reset()
	polls := 0
	for b.Loop() {
		got, err := poll()
		if err != nil {
			b.Fatal(err)
		}
		if got != want {
			b.Fatalf("poll = %s, want %s", got, want)
		}
		polls++
	}
	b.ReportMetric(float64(srv.Requests())/float64(polls), "requests/op")
	b.ReportMetric(float64(srv.Bytes())/float64(polls), "bytes/op")
}
