package signature_test

import (
	"testing"

	"nuon.dev/nuon/internal/gitobj"
)

// BenchmarkVerifyCommit verifies one signed commit, as an agent does on
// every new desired state. The target is 1,000 verifications in under
// half a second: under 500µs/op.
func BenchmarkVerifyCommit(b *testing.B) {
	render := signer(b, "render")
	as := trust(b, "acme "+signer(b, "acme").AuthorizedKey(), "nuon-render "+render.AuthorizedKey())
	c := commit("nuon: render acme generation 7\n\nNuon-Install: acme\nNuon-Generation: 7\n")
	if err := gitobj.Sign(c, render); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := as.VerifyCommit(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignCommit signs one commit, as the renderer does for every
// changed install.
func BenchmarkSignCommit(b *testing.B) {
	render := signer(b, "render")
	c := commit("nuon: render acme generation 7\n\nNuon-Install: acme\nNuon-Generation: 7\n")
	for b.Loop() {
		if err := gitobj.Sign(c, render); err != nil {
			b.Fatal(err)
		}
	}
}
