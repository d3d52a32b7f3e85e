package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestFleetLoginNext: logging in with a hostile next lands on /fleet of
// this server, never on another host.
func TestFleetLoginNext(t *testing.T) {
	_, hs := fixtureFleet(t)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct{ next, want string }{
		{`/fleet/../\evil.example`, "/fleet"},
		{"//evil.example/fleet", "/fleet"},
		{"https://evil.example/fleet", "/fleet"},
		{"/fleet/%2e%2e/%5Cevil.example", "/fleet"},
		{"/fleet/installs/acme", "/fleet/installs/acme"},
	} {
		t.Run(tc.next, func(t *testing.T) {
			form := url.Values{"token": {viewToken}, "next": {tc.next}}
			resp, err := client.Post(hs.URL+"/fleet/login", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != tc.want {
				t.Fatalf("%s, Location %q; want 303 to %q", resp.Status, resp.Header.Get("Location"), tc.want)
			}
		})
	}
}
