package trust

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hiddeco/sshsig"

	"nuon.dev/nuon/schemas"
)

// v1 is the pinned version of the chain tests: root keys A, B, C, two of
// them needed.
func v1(t *testing.T) *Root {
	return signedRoot(t, content(t, 1, 2, "A", "B", "C"), "A", "B")
}

// withSig returns r with one more signature by key over r's signed
// content in namespace ns.
func withSig(t *testing.T, r *Root, key, ns string) *Root {
	t.Helper()
	sig, err := sshsig.Sign(bytes.NewReader(r.signed), testKey(t, key), sshsig.HashSHA512, ns)
	if err != nil {
		t.Fatal(err)
	}
	c := *r
	c.Signatures = append(append([]Signature(nil), r.Signatures...), Signature{Fingerprint: fp(testKey(t, key)), sig: sig})
	b, err := c.Encoded()
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, b)
}

func TestVerify(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name string
		prev func(*testing.T) *Root
		next func(*testing.T) *Root
		want error
		msg  string
	}{
		{name: "threshold of old and new met",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A", "C") }},
		{name: "threshold unmet",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A") },
			want: ErrThreshold, msg: "1 of version 1's root keys signed, 2 needed"},
		{name: "same key signing twice counts once",
			next: func(t *testing.T) *Root {
				return withSig(t, signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A"), "A", Namespace)
			},
			want: ErrThreshold},
		{name: "signature in the git namespace",
			next: func(t *testing.T) *Root {
				return withSig(t, signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A"), "B", "git")
			},
			want: ErrBadSignature, msg: `root key "B"`},
		{name: "unknown signers ignored",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A", "X", "Y") },
			want: ErrThreshold},
		{name: "expired",
			next: func(t *testing.T) *Root {
				c := content(t, 2, 2, "A", "B", "C")
				c.Expires = now.Format(time.RFC3339)
				return signedRoot(t, c, "A", "B")
			},
			want: ErrExpired},
		{name: "skip",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 3, 2, "A", "B", "C"), "A", "B") },
			want: ErrSkip, msg: "3 follows 1, want 2"},
		{name: "same version",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 1, 2, "A", "B", "C"), "A", "B") },
			want: ErrRollback},
		{name: "rollback",
			prev: func(t *testing.T) *Root { return signedRoot(t, content(t, 5, 2, "A", "B", "C"), "A", "B") },
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 4, 2, "A", "B", "C"), "A", "B") },
			want: ErrRollback},
		{name: "rotation to new keys signed by both",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "D", "E", "F"), "A", "B", "D", "E") }},
		{name: "old keys' threshold missing",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "D", "E", "F"), "A", "D", "E", "F") },
			want: ErrThreshold, msg: "of version 1's root keys"},
		{name: "new keys' threshold missing",
			next: func(t *testing.T) *Root { return signedRoot(t, content(t, 2, 2, "C", "D", "E"), "A", "B", "D") },
			want: ErrThreshold, msg: "of its own root keys"},
		{name: "revoked root key does not count",
			next: func(t *testing.T) *Root {
				c := content(t, 2, 2, "A", "B", "C")
				c.Revocations = []schemas.TrustRevocation{{Fingerprint: fp(testKey(t, "B")), RevokedAt: now.Format(time.RFC3339), Reason: "leaked"}}
				return signedRoot(t, c, "A", "B")
			},
			want: ErrThreshold, msg: "of its own root keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := v1(t)
			if tc.prev != nil {
				prev = tc.prev(t)
			}
			err := Verify(prev, tc.next(t), now)
			if !errors.Is(err, tc.want) || tc.want == nil && err != nil {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			if tc.want == nil {
				return
			}
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("%T is not a *StepError", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Verify: %v, want it to say %q", err, tc.msg)
			}
		})
	}
}

func TestVerifyChangedContent(t *testing.T) {
	r := signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A", "B")
	b, _ := r.Encoded()
	b = bytes.Replace(b, []byte(`"name": "ops-eu"`), []byte(`"name": "ops-us"`), 1)
	err := Verify(v1(t), mustParse(t, b), t0)
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("Verify of a changed root: %v, want ErrBadSignature", err)
	}
}

func TestChain(t *testing.T) {
	now := t0
	v2 := signedRoot(t, content(t, 2, 2, "A", "B", "D"), "A", "B", "D")
	v3 := signedRoot(t, content(t, 3, 1, "D", "E"), "B", "D", "E")
	expired := func(v int64, keys ...string) *Root {
		c := content(t, v, 2, keys...)
		c.Expires = now.Add(-time.Hour).Format(time.RFC3339)
		return signedRoot(t, c, keys...)
	}
	for _, tc := range []struct {
		name     string
		pinned   *Root
		versions []*Root
		want     int64
		err      error
		from, to int64
	}{
		{name: "walks to the newest", pinned: v1(t), versions: []*Root{v3, v2}, want: 3},
		{name: "older files ignored", pinned: v2, versions: []*Root{v1(t), v2, v3}, want: 3},
		{name: "nothing newer", pinned: v1(t), want: 1},
		{name: "missing step", pinned: v1(t), versions: []*Root{v3}, err: ErrSkip, from: 1, to: 3},
		{name: "bad step stops the walk", pinned: v1(t),
			versions: []*Root{v2, signedRoot(t, content(t, 3, 1, "D", "E"), "D", "E"),
				signedRoot(t, content(t, 4, 1, "D", "E"), "D", "E")},
			err: ErrThreshold, from: 2, to: 3},
		{name: "fork", pinned: v1(t), versions: []*Root{v2, signedRoot(t, content(t, 2, 2, "A", "B", "C"), "A", "B")},
			err: ErrFork, from: 1, to: 2},
		{name: "expired steps are walked through", pinned: v1(t), versions: []*Root{expired(2, "A", "B"), v3FromAB(t)}, want: 3},
		{name: "expired newest refused", pinned: v1(t), versions: []*Root{expired(2, "A", "B")}, err: ErrExpired, from: 1, to: 2},
		{name: "pinned not self-signed", pinned: signedRoot(t, content(t, 1, 2, "A", "B", "C"), "A"), err: ErrThreshold, from: 1, to: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Chain(tc.pinned, tc.versions, now)
			if tc.err != nil {
				var se *StepError
				if !errors.Is(err, tc.err) || !errors.As(err, &se) || se.From != tc.from || se.To != tc.to {
					t.Fatalf("Chain: %v, want %v at %d -> %d", err, tc.err, tc.from, tc.to)
				}
				return
			}
			if err != nil || got.Version != tc.want {
				t.Fatalf("Chain: %v, %v; want version %d", got, err, tc.want)
			}
		})
	}
}

// v3FromAB is a version 3 that follows a version 2 with root keys A and B.
func v3FromAB(t *testing.T) *Root {
	return signedRoot(t, content(t, 3, 2, "A", "B"), "A", "B")
}

// BenchmarkChain is the cost of walking ten versions, each signed by two
// old and two new root keys: what an agent pays once per new root, never
// on an idle poll (3 to 8 ms for the ten on a busy two-core machine).
func BenchmarkChain(b *testing.B) {
	keys := [][]string{{"A", "B", "C"}, {"B", "C", "D"}}
	pinned := signedRoot(b, content(b, 1, 2, keys[0]...), "A", "B")
	var vs []*Root
	for v := int64(2); v <= 11; v++ {
		prev, cur := keys[v%2], keys[(v+1)%2]
		vs = append(vs, signedRoot(b, content(b, v, 2, cur...), prev[1], prev[2], cur[0], cur[1]))
	}
	for b.Loop() {
		if _, err := Chain(pinned, vs, t0); err != nil {
			b.Fatal(err)
		}
	}
}
