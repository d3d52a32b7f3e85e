package gitproto

import (
	"context"
	"fmt"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh/knownhosts"

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

// BenchmarkSSHPoll measures one install's idle poll over SSH (Debian's
// sshd on loopback, one connection kept open) in repositories with 1,000
// and 10,000 install refs: git protocol bytes received, bytes on the wire
// both ways (SSH framing and encryption included) and round trips, per
// poll. v2 is sshd with AcceptEnv GIT_PROTOCOL (ls-refs with ref-prefix);
// v0 is sshd without it, where git advertises every ref.
func BenchmarkSSHPoll(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("refs=%d", n), func(b *testing.B) {
			f := newFixture(b, n)
			ref := installRef(n / 2)
			want := f.commits[(n/2)%2]
			for _, v := range []struct {
				name string
				opts []gittest.SSHOption
			}{{"v2", nil}, {"v0", []gittest.SSHOption{gittest.WithoutGitProtocolEnv()}}} {
				b.Run(v.name, func(b *testing.B) {
					srv := gittest.NewSSHServer(b, f.srv.Root, v.opts...)
					hk, err := knownhosts.New(srv.KnownHosts)
					if err != nil {
						b.Fatal(err)
					}
					c := &Client{URL: srv.URL("tenant.git"), SSH: &SSHAuth{Signer: srv.ClientSigner, HostKeyCallback: hk}}
					defer c.Close()
					if _, err := c.LsRefs(ctx, string(ref)); err != nil { // connect
						b.Fatal(err)
					}
					c.ResetStats()
					srv.ResetWire()
					polls := 0
					for b.Loop() {
						refs, err := c.LsRefs(ctx, string(ref))
						if err != nil {
							b.Fatal(err)
						}
						if refs[ref] != want {
							b.Fatalf("poll = %s, want %s", refs[ref], want)
						}
						polls++
					}
					st := c.Stats()
					sent, recv, rts := srv.Wire()
					b.ReportMetric(float64(st.Received)/float64(polls), "git-bytes-in/op")
					b.ReportMetric(float64(st.Sent)/float64(polls), "git-bytes-out/op")
					b.ReportMetric(float64(recv)/float64(polls), "wire-bytes-in/op")
					b.ReportMetric(float64(sent)/float64(polls), "wire-bytes-out/op")
					b.ReportMetric(float64(rts)/float64(polls), "round-trips/op")
				})
			}
		})
	}
}

// BenchmarkStatusPush measures one status push over HTTP to a repository
// with 1,000 install refs: requests and bytes each way at the server.
// receive-pack is this package's Push (one POST: commands and pack);
// go-git is go-git v5's Remote.Push, which first GETs the advertisement
// of every ref.
func BenchmarkStatusPush(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b, 1000)
	local := memory.NewStorage()
	if _, err := (&Client{URL: f.url}).Fetch(ctx, local, []plumbing.Hash{f.commits[1]}, nil); err != nil {
		b.Fatal(err)
	}
	ref := plumbing.ReferenceName("refs/heads/nuon/status/acme")
	for _, impl := range []string{"receive-pack", "go-git"} {
		b.Run(impl, func(b *testing.B) {
			c := &Client{URL: f.url}
			remote := git.NewRemote(local, &config.RemoteConfig{Name: "origin", URLs: []string{f.url}})
			old := plumbing.ZeroHash
			if h, err := gittest.Run(f.dir, nil, "rev-parse", "--verify", "--quiet", ref.String()); err == nil && h != "" {
				old = plumbing.NewHash(h)
			}
			if old.IsZero() {
				// The first push creates the ref with all of main's
				// history; measure the pushes after it.
				first := newCommit(b, local, f.commits[1], "phase: pending\n")
				if err := c.Push(ctx, local, RefUpdate{Name: ref, New: first}); err != nil {
					b.Fatal(err)
				}
				old = first
			}
			parent := old
			f.srv.Reset()
			pushes := 0
			for b.Loop() {
				next := newCommit(b, local, parent, fmt.Sprintf("phase: ready\nn: %d\n", pushes))
				switch impl {
				case "receive-pack":
					if err := c.Push(ctx, local, RefUpdate{Name: ref, Old: old, New: next}); err != nil {
						b.Fatal(err)
					}
				default:
					if err := local.SetReference(plumbing.NewHashReference(ref, next)); err != nil {
						b.Fatal(err)
					}
					if err := remote.PushContext(ctx, &git.PushOptions{RefSpecs: []config.RefSpec{config.RefSpec(ref + ":" + ref)}}); err != nil {
						b.Fatal(err)
					}
				}
				old, parent = next, next
				pushes++
			}
			b.ReportMetric(float64(f.srv.Requests())/float64(pushes), "requests/op")
			b.ReportMetric(float64(f.srv.RequestBytes())/float64(pushes), "bytes-sent/op")
			b.ReportMetric(float64(f.srv.Bytes())/float64(pushes), "bytes-received/op")
		})
	}
}
