package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/schemas"
)

// TestStatusContacts: with --server, a row whose status commit is old but
// whose agent polled recently is not Unreachable; one that did not poll
// stays Unreachable, its reason naming the last signed contact; the
// request carries the operator's signature, and a refusal is an error
// that says so. (cmd/nuon's status test reads a real server.)
func TestStatusContacts(t *testing.T) {
	const token = "operators-token-0123456789"
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != livenessPath || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "nuon: the key is not trusted for requests", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, `{"now":%q,"contacts":[{"install":"acme","at":%q,"kind":"poll"},{"install":"globex","at":%q,"kind":"push"}]}`,
			now.Format(time.RFC3339), now.Add(-time.Minute).Format(time.RFC3339), now.Add(-time.Hour).Format(time.RFC3339))
	}))
	defer srv.Close()
	auth := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	old := now.Add(-2 * time.Hour)
	rows := []fleet.Install{
		{Install: "acme", Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Time: old},
		{Install: "globex", Phase: schemas.InstallReady, HeartbeatEvery: "10m0s", Time: old},
	}
	got, err := withContacts(context.Background(), srv.URL, "", auth(token), rows)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Unreachable || got[0].State != schemas.InstallReady || got[0].ContactKind != "poll" {
		t.Errorf("acme polled a minute ago: %s %q", got[0].State, got[0].ContactKind)
	}
	if want := "no signed contact since 2030-01-01T11:00:00Z (heartbeat 10m0s)"; !got[1].Unreachable || got[1].Reason() != want {
		t.Errorf("globex: %s %q, want Unreachable %q", got[1].State, got[1].Reason(), want)
	}
	if _, err := withContacts(context.Background(), srv.URL, "", auth("wrong"), rows); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused signature: %v", err)
	}
	if _, err := withContacts(context.Background(), "https://user:pw@example.com", "", auth(token), rows); err == nil {
		t.Error("a server URL with credentials: no error")
	}
}
