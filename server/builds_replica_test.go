package server_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"nuon.dev/nuon/builder/buildreq"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/server"
)

// TestBuildsThroughReplica: a read replica answers a build request's
// state from its mirror, and follows each change of it (filed, taken):
// a queue write moves the writer's replica version, so the replica
// fetches the request's ref though no install ref moved.
func TestBuildsThroughReplica(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.trustBuilds()
	w, err := server.New(ctx, server.Config{Dir: e.dir, RenderKey: e.keys["render"], PollInterval: time.Hour,
		ReplicaToken: replicaToken, Logger: slog.New(slog.NewTextHandler(e.log, nil)).With("writer", true)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	ws := httptest.NewServer(w)
	t.Cleanup(func() { ws.Close(); w.Close() })
	_, r := replica(t, e, ws.URL, 50*time.Millisecond)

	ci, _ := loadKey(t, "ci")
	agentKey, _ := loadKey(t, "build-agent")
	if _, err := buildreq.NewClient(ws.URL, ci).File(ctx, buildRequest(t, ci, "r1", "network")); err != nil {
		t.Fatal(err)
	}
	atReplica := buildreq.NewClient(r.URL, ci)
	state := func() string {
		st, err := atReplica.Status(ctx, "r1", 0)
		if err != nil {
			return err.Error()
		}
		return st.State
	}
	waitUntil(t, "the replica to show r1 queued", func() bool { return state() == schemas.BuildQueued })
	if sub, err := buildreq.NewClient(ws.URL, agentKey).Next(ctx, 0, 60); err != nil || sub == nil {
		t.Fatalf("take r1: %v %v", sub, err)
	}
	waitUntil(t, "the replica to show r1 taken", func() bool { return state() == schemas.BuildRunning })
}
