package server

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// TestSafeNext: a login's next stays a path under /fleet; whatever a
// browser could read as another host, scheme or a path outside the view
// goes to /fleet.
func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"", "/fleet"},
		{"/fleet", "/fleet"},
		{"/fleet/", "/fleet"},
		{"/fleet/installs/acme", "/fleet/installs/acme"},
		{"/fleet?channel=beta&phase=Failed", "/fleet?channel=beta&phase=Failed"},
		{"/fleet/installs/acme?x=1#frag", "/fleet/installs/acme?x=1"},
		{"/fleet/./installs//acme", "/fleet"},
		{"/fleet/installs/../installs/acme", "/fleet/installs/acme"},
		// The issue's: a browser reads /\evil.example as //evil.example.
		{`/fleet/../\evil.example`, "/fleet"},
		{`/fleet/..\evil.example`, "/fleet"},
		{`/fleet\..\..\evil.example`, "/fleet"},
		{"/fleet/%5C%5Cevil.example", "/fleet"},
		{"/fleet/../evil", "/fleet"},
		{"/fleet/%2e%2e/evil", "/fleet"},
		{"/fleet/%2E%2E/%2E%2E//evil.example", "/fleet"},
		{"/fleet/..%2F..%2Fevil", "/fleet"},
		{"/fleetevil", "/fleet"},
		{"/fleet.evil.example", "/fleet"},
		{"//evil.example/fleet", "/fleet"},
		{"///evil.example/fleet", "/fleet"},
		{"/\\evil.example", "/fleet"},
		{"https://evil.example/fleet", "/fleet"},
		{"javascript:alert(1)//fleet", "/fleet"},
		{"/fleet/\tinstalls", "/fleet"},
		{"/fleet/\r\nLocation: https://evil.example", "/fleet"},
		{"/fleet/%0d%0aSet-Cookie:x=1", "/fleet"},
		{"/fleet/%00", "/fleet"},
		{"/fleet\x7f", "/fleet"},
		{"fleet", "/fleet"},
		{"/fleet/" + strings.Repeat("a", 3000), "/fleet"},
		{"/fleet/%zz", "/fleet"},
		{"/fleet/installs/a%3Fb", "/fleet/installs/a%3Fb"},
	} {
		t.Run(tc.next, func(t *testing.T) {
			if got := safeNext(tc.next); got != tc.want {
				t.Errorf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
			}
		})
	}
}

// FuzzSafeNext: whatever next is, the redirect is a same-origin path
// under /fleet: no scheme, host or user, no backslash or control
// character, a clean path.
func FuzzSafeNext(f *testing.F) {
	for _, seed := range []string{"", "/fleet", "/fleet/installs/acme?x=1", `/fleet/../\evil.example`, "//evil.example", "/fleet/%2e%2e/x", "https://x/fleet", "/fleet/%5c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got != "/fleet" && !strings.HasPrefix(got, "/fleet/") && !strings.HasPrefix(got, "/fleet?") {
			t.Fatalf("safeNext(%q) = %q: not under /fleet", next, got)
		}
		if unsafeInPath(got) || strings.HasPrefix(got, "//") {
			t.Fatalf("safeNext(%q) = %q", next, got)
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("safeNext(%q) = %q: %v", next, got, err)
		}
		if u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
			t.Fatalf("safeNext(%q) = %q: leaves the origin", next, got)
		}
		if u.Path != path.Clean(u.Path) || unsafeInPath(u.Path) || (u.Path != "/fleet" && !strings.HasPrefix(u.Path, "/fleet/")) {
			t.Fatalf("safeNext(%q) = %q: path %q", next, got, u.Path)
		}
		// The browser resolves it against the server's own URL.
		base, _ := url.Parse("https://nuon.example.com/fleet/login")
		if r := base.ResolveReference(u); r.Host != base.Host || r.Scheme != base.Scheme {
			t.Fatalf("safeNext(%q) = %q resolves to %s", next, got, r)
		}
	})
}
