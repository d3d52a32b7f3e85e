package gitproto

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// TestVersion0FallbackHTTP: a server without protocol version 2 still
// answers LsRefs and Fetch, at version 0's cost, and the Client says so
// once, naming the host.
func TestVersion0FallbackHTTP(t *testing.T) {
	base := v0Server(t)
	var logs bytes.Buffer
	c := &Client{URL: base + "/old.git", Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx := context.Background()
	var main plumbing.Hash
	for range 2 {
		refs, err := c.LsRefs(ctx, "refs/heads/main")
		if err != nil {
			t.Fatal(err)
		}
		main = refs["refs/heads/main"]
		if main.IsZero() || len(refs) != 1 {
			t.Fatalf("LsRefs = %v, want refs/heads/main alone", refs)
		}
	}
	st := memory.NewStorage()
	if _, err := c.Fetch(ctx, st, []plumbing.Hash{main}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.HasEncodedObject(main); err != nil {
		t.Fatalf("fetched store lacks %s: %v", main, err)
	}
	if got := c.Stats().Version; got != 0 {
		t.Errorf("Stats().Version = %d, want 0", got)
	}
	u, _ := url.Parse(base)
	if n := strings.Count(logs.String(), "protocol version 0"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "host="+u.Host) {
		t.Errorf("warning does not name host %s:\n%s", u.Host, logs.String())
	}

	empty := &Client{URL: base + "/empty.git"}
	refs, err := empty.LsRefs(ctx, "refs/heads/")
	if err != nil || len(refs) != 0 {
		t.Errorf("LsRefs on an empty repository = %v, %v; want no refs", refs, err)
	}
	if _, err := empty.Capabilities(ctx); err == nil {
		t.Errorf("Capabilities of a version 0 server succeeded")
	}
}
