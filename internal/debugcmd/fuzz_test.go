package debugcmd

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"nuon.dev/nuon/schemas"
)

// FuzzParse checks that any words either parse into a command that
// round-trips through Words, or are refused with a *Refusal; and that an
// accepted command never carries a shell metacharacter or a path.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"get pods", "get secret db -n shop", "describe deployment web", "events -n shop",
		"logs web-0 -c web --tail 10 --since 5m", "status api", "history api",
		"state list", "state show random_password.db", "exec web-0 -- sh", "get pods -n=a",
		"logs x --tail=1", `state show module.a["k"].b.c`,
	} {
		for _, p := range []string{schemas.TypeManifests, schemas.TypeHelm, schemas.TypeTerraform} {
			f.Add(p, strings.ReplaceAll(s, " ", "\x00"))
		}
	}
	f.Fuzz(func(t *testing.T, plugin, joined string) {
		words := strings.Split(joined, "\x00")
		c, err := Parse(plugin, words)
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Parse(%q, %q) = %v, not a *Refusal", plugin, words, err)
			}
			return
		}
		if !slices.Contains(Allowed[plugin], c.Op) {
			t.Fatalf("Parse(%q, %q) = op %q, not on the allow-list", plugin, words, c.Op)
		}
		for _, f := range []string{c.Kind, c.Name, c.Namespace, c.Container, c.Address} {
			if strings.ContainsAny(f, " \t\n;|&$`'\\<>/*?") {
				t.Fatalf("Parse(%q, %q) accepted %q", plugin, words, f)
			}
		}
		again, err := Parse(plugin, c.Words())
		if err != nil || again != c {
			t.Fatalf("Parse(Words()) = %+v, %v; want %+v", again, err, c)
		}
	})
}
