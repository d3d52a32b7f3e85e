package server

import (
	"testing"
	"time"
)

// TestLivenessForget: a deleted install's contact leaves the table, what
// the operators read and the file saved; the others stay.
func TestLivenessForget(t *testing.T) {
	l := newLiveness()
	now := time.Now()
	l.record("acme", contactPoll, now)
	l.record("globex", contactPush, now)
	l.forget("globex")
	if _, _, ok := l.last("globex"); ok {
		t.Error("globex's contact is still there after forget")
	}
	if _, kind, ok := l.last("acme"); !ok || kind != "poll" {
		t.Errorf("acme: %q %v, want its poll", kind, ok)
	}
	for _, c := range l.since(0) {
		if c.Install == "globex" {
			t.Errorf("since(0) lists the forgotten globex: %+v", c)
		}
	}
	path := t.TempDir() + "/nuon-liveness.json"
	if err := l.save(path); err != nil {
		t.Fatal(err)
	}
	back := newLiveness()
	if err := back.load(path); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := back.last("globex"); ok {
		t.Error("the saved table brings globex back")
	}
	if _, _, ok := back.last("acme"); !ok {
		t.Error("the saved table lost acme")
	}
	var nilTable *liveness
	nilTable.forget("acme") // a server without liveness
}
