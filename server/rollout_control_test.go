package server_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/rollout"
	"nuon.dev/nuon/schemas"
	"nuon.dev/nuon/trust"
)

// rolloutRequest builds a signed rollout request, signed by key as
// requester, created at created; it returns the submission and its
// commit.
func rolloutRequest(t *testing.T, key *signature.Signer, requester, channel, action, id string, created time.Time) (schemas.SignedRequest, string) {
	t.Helper()
	created = created.UTC().Truncate(time.Second)
	r := &schemas.RolloutRequest{APIVersion: schemas.APIVersion, Kind: schemas.KindRolloutRequest, ID: id, Channel: channel,
		Action: action, Reason: "testing " + action, Requester: requester, Created: created, Deadline: created.Add(10 * time.Minute)}
	b := gitobj.NewBatch()
	h, err := requests.FileRollout(b, r, key)
	if err != nil {
		t.Fatal(err)
	}
	_, raw, ok := b.Get(h)
	if !ok {
		t.Fatal("no commit in the batch")
	}
	data, _ := json.MarshalIndent(r, "", "  ")
	return schemas.SignedRequest{File: string(data) + "\n", Commit: string(raw)}, h.String()
}

// postRollout sends sub to the server signed over HTTP with key.
func (e *env) postRollout(key *signature.Signer, sub schemas.SignedRequest) (int, string) {
	e.t.Helper()
	body, _ := json.Marshal(sub)
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+requests.RolloutPath, bytes.NewReader(body))
	if err := operatorSigner(key).Sign(req); err != nil {
		e.t.Fatal(err)
	}
	return send(e.t, req.Method, req.URL.String(), req.Header, body)
}

// rolloutState is stable's rollout.json on the server now.
func (e *env) rolloutState() schemas.RolloutState {
	e.t.Helper()
	var s schemas.RolloutState
	if err := json.Unmarshal([]byte(e.mustGit(e.dir, "show", schemas.RolloutRef("stable")+":"+schemas.RolloutStateFile)), &s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// startCanary gives stable a canary wave (acme) baking bake and a rest
// wave (initech), moves stable to database 1.1.0 and waits for acme to
// get it.
func startCanary(t *testing.T, e *env, bake string) {
	t.Helper()
	e.pushMain("stable rolls out in waves", func(work string) {
		appendFile(t, filepath.Join(work, "channels", "stable.yaml"), "rollout:\n  waves:\n    - name: canary\n      selector: {matchLabels: {ring: canary}}\n      bake: "+bake+"\n    - name: rest\n      rest: true\n")
		appendFile(t, filepath.Join(work, "installs", "acme.yaml"), "labels: {ring: canary}\n")
	})
	e.waitDecision(schemas.DecisionBaseline)
	before := e.serverRef(schemas.InstallRef("acme"))
	e.pushMain("stable: database 1.1.0", func(work string) {
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.0.0", "database: 1.1.0")
	})
	e.waitDecision(schemas.DecisionStarted)
	deadline := time.Now().Add(10 * time.Second)
	for e.serverRef(schemas.InstallRef("acme")) == before {
		if time.Now().After(deadline) {
			t.Fatal("acme's desired ref did not move after the wave opened")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reportHealthy pushes a status of acme, signed by its key, saying its
// current desired commit is applied and healthy.
func (e *env) reportHealthy(install string) {
	e.t.Helper()
	desired := e.serverRef(schemas.InstallRef(install))
	status, _ := json.Marshal(schemas.Status{APIVersion: schemas.APIVersion, Kind: "Status", Install: install, Desired: desired, Applied: desired,
		Phase: schemas.InstallReady, Components: map[string]schemas.ComponentStatus{"database": {Phase: schemas.PhaseApplied}}})
	local := localRepo(e.t)
	c := e.statusCommit(local, install, "", e.keyFiles[install], string(status))
	e.mustGit(local, "push", "--quiet", e.proxy(install, e.keys[install]), c+":"+schemas.StatusRef(install))
}

// TestRolloutPauseResumeAbort: an operator pauses a running rollout with
// a signed request; its canary proves healthy past the bake time, and
// still no wave opens; a replay of the pause is refused; resume opens the
// rest wave; abort stops the rollout with every install keeping what it
// has, and a new pin starts a new rollout. Each is a decision commit that
// names the operator, the key and the request commit.
func TestRolloutPauseResumeAbort(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	startCanary(t, e, "1s")
	initechBefore := e.serverRef(schemas.InstallRef("initech"))

	pause, pauseCommit := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-pause-1", time.Now())
	code, out := e.postRollout(op, pause)
	if code != http.StatusOK || !strings.Contains(out, `"phase":"paused"`) {
		t.Fatalf("pause: %d %s", code, out)
	}
	s := e.rolloutState()
	if s.Phase != schemas.RolloutPaused || s.Decision.Kind != schemas.DecisionPaused || s.Decision.Request == nil ||
		s.Decision.Request.Commit != pauseCommit || s.Decision.Request.Principal != "support" || s.Decision.Request.Key != requests.KeyID(op.PublicKey()) {
		t.Fatalf("paused state: %+v %+v", s.Phase, s.Decision)
	}
	// The kept request verifies again against trust/requests.
	trustReq := signature.AllowedSigners{Signers: []signature.AllowedSigner{{Principals: []string{"support"}, Key: op.PublicKey()}}}
	if r, _, err := requests.VerifyRollout(s.Decision.Request.Signed, &trustReq); err != nil || r.Action != schemas.RolloutPause {
		t.Fatalf("kept request: %v", err)
	}
	msg := e.mustGit(e.dir, "log", "-1", "--format=%G? %B", schemas.RolloutRef("stable"))
	if !strings.Contains(msg, "nuon: rollout stable: paused wave 1 (canary)") || !strings.Contains(msg, rollout.TrailerRolloutRequest+": "+pauseCommit) ||
		!strings.Contains(msg, "support paused the rollout (was running): testing pause") {
		t.Errorf("pause commit: %s", msg)
	}

	// Healthy past its bake: a paused rollout opens nothing.
	e.reportHealthy("acme")
	time.Sleep(1500 * time.Millisecond)
	for range 3 {
		if _, err := e.srv.EvaluateRollouts(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.rolloutState(); got.Phase != schemas.RolloutPaused || got.Decision.Kind != schemas.DecisionPaused {
		t.Fatalf("a paused rollout decided %s", got.Decision.Kind)
	}
	if e.serverRef(schemas.InstallRef("initech")) != initechBefore {
		t.Fatal("initech moved while the rollout was paused")
	}

	// The same request again, and a second pause: refused, nothing moves.
	tip := e.serverRef(schemas.RolloutRef("stable"))
	if code, out := e.postRollout(op, pause); code != http.StatusConflict || !strings.Contains(out, "carried out already") {
		t.Errorf("replayed pause: %d %s", code, out)
	}
	again, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-pause-2", time.Now())
	if code, out := e.postRollout(op, again); code != http.StatusConflict || !strings.Contains(out, "only a running rollout pauses") {
		t.Errorf("second pause: %d %s", code, out)
	}
	if e.serverRef(schemas.RolloutRef("stable")) != tip {
		t.Fatal("a refused request moved the rollout ref")
	}

	resume, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutResume, "r-resume-1", time.Now())
	if code, out := e.postRollout(op, resume); code != http.StatusOK || !strings.Contains(out, `"phase":"running"`) {
		t.Fatalf("resume: %d %s", code, out)
	}
	e.waitDecision(schemas.DecisionPassed)
	deadline := time.Now().Add(10 * time.Second)
	for e.serverRef(schemas.InstallRef("initech")) == initechBefore {
		if time.Now().After(deadline) {
			t.Fatal("initech did not move after resume")
		}
		time.Sleep(20 * time.Millisecond)
	}
	initechNew := e.serverRef(schemas.InstallRef("initech"))
	// The replayed pause is still refused after the resume.
	if code, out := e.postRollout(op, pause); code != http.StatusConflict || !strings.Contains(out, "carried out already") {
		t.Errorf("pause replayed after resume: %d %s", code, out)
	}

	abort, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutAbort, "r-abort-1", time.Now())
	if code, out := e.postRollout(op, abort); code != http.StatusOK || !strings.Contains(out, `"phase":"aborted"`) {
		t.Fatalf("abort: %d %s", code, out)
	}
	e.reportHealthy("initech")
	for range 3 {
		if _, err := e.srv.EvaluateRollouts(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	s = e.rolloutState()
	if s.Phase != schemas.RolloutAborted || s.Decision.Kind != schemas.DecisionAborted {
		t.Fatalf("after abort: %s %s", s.Phase, s.Decision.Kind)
	}
	if e.serverRef(schemas.InstallRef("initech")) != initechNew {
		t.Fatal("an aborted rollout moved initech")
	}
	resume2, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutResume, "r-resume-2", time.Now())
	if code, out := e.postRollout(op, resume2); code != http.StatusConflict || !strings.Contains(out, "only a paused rollout resumes") {
		t.Errorf("resume of an aborted rollout: %d %s", code, out)
	}

	// A new pin starts a new rollout from wave 1.
	e.pushMain("stable: database back to 1.0.0", func(work string) {
		replaceIn(t, filepath.Join(work, "channels", "stable.yaml"), "database: 1.1.0", "database: 1.0.0")
	})
	started := e.waitDecision(schemas.DecisionStarted)
	if started.Rollout != s.Rollout+1 || started.Decision.Wave != 1 || started.Phase != schemas.RolloutRunning {
		t.Fatalf("new rollout after abort: rollout %d wave %d %s", started.Rollout, started.Decision.Wave, started.Phase)
	}
	if e.serverRef(schemas.InstallRef("initech")) != initechNew {
		t.Fatal("the new rollout moved initech, outside its first wave")
	}
}

// TestRolloutControlAttacks: rollout requests that must be refused, each
// with its reason, the rollout ref and every install ref unmoved.
func TestRolloutControlAttacks(t *testing.T) {
	e := newEnv(t)
	op, _ := loadKey(t, "operator")
	startCanary(t, e, "1h")
	tip := e.serverRef(schemas.RolloutRef("stable"))
	refs := map[string]string{}
	for _, id := range []string{"acme", "initech", "globex"} {
		refs[id] = e.serverRef(schemas.InstallRef(id))
	}
	now := time.Now()
	good, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-good", now)
	byInstall, _ := rolloutRequest(t, e.keys["acme"], "support", "stable", schemas.RolloutPause, "r-acme", now)
	asOther, _ := rolloutRequest(t, op, "someone-else", "stable", schemas.RolloutPause, "r-other", now)
	expired, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-old", now.Add(-time.Hour))
	future, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-future", now.Add(time.Hour))
	beta, _ := rolloutRequest(t, op, "support", "beta", schemas.RolloutPause, "r-beta", now)
	nosuch, _ := rolloutRequest(t, op, "support", "nosuch", schemas.RolloutPause, "r-nosuch", now)
	swapped := good
	swapped.File = strings.Replace(good.File, `"pause"`, `"abort"`, 1)
	otherChannel, _ := rolloutRequest(t, op, "support", "beta", schemas.RolloutAbort, "r-good", now)
	moved := good
	moved.File = otherChannel.File
	logs, _ := newRequest(t, op, "support", "acme", "r-logs", [20]byte{})

	for _, tc := range []struct {
		name string
		key  *signature.Signer
		sub  schemas.SignedRequest
		code int
		want string
	}{
		{"untrusted key", e.keys["render"], good, http.StatusUnauthorized, "not trusted for requests"},
		{"install key", e.keys["acme"], byInstall, http.StatusUnauthorized, "not trusted for requests"},
		{"signed by another key", op, byInstall, http.StatusForbidden, "not signed by a trusted operator key"},
		{"requester is not the signer", op, asOther, http.StatusForbidden, `requester "someone-else" but signed by "support"`},
		{"expired", op, expired, http.StatusForbidden, "expired"},
		{"created in the future", op, future, http.StatusForbidden, "in the future"},
		{"channel without a rollout", op, beta, http.StatusNotFound, "channel beta has no rollout"},
		{"unknown channel", op, nosuch, http.StatusNotFound, "channel nosuch has no rollout"},
		{"file swapped under the commit", op, swapped, http.StatusBadRequest, "is not the tree of"},
		{"file of another request", op, moved, http.StatusBadRequest, "is not the tree of"},
		{"an install's request", op, logs, http.StatusBadRequest, "is not rollouts/<channel>/<id>.json"},
		{"not JSON", op, schemas.SignedRequest{File: "x", Commit: "tree 0\n"}, http.StatusBadRequest, "invalid request"},
	} {
		code, out := e.postRollout(tc.key, tc.sub)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, code, strings.TrimSpace(out), tc.code, tc.want)
		}
	}
	if got := e.serverRef(schemas.RolloutRef("stable")); got != tip {
		t.Fatalf("a refused request moved the rollout ref to %s", got)
	}
	for id, before := range refs {
		if got := e.serverRef(schemas.InstallRef(id)); got != before {
			t.Fatalf("%s moved", id)
		}
	}
	// The good one, once; its replay, refused.
	if code, out := e.postRollout(op, good); code != http.StatusOK {
		t.Fatalf("good: %d %s", code, out)
	}
	if code, out := e.postRollout(op, good); code != http.StatusConflict || !strings.Contains(out, "carried out already") {
		t.Fatalf("replay: %d %s", code, out)
	}
}

// pushScopedRoot commits a trust root (version 1, a fresh root key) whose
// operators role holds the operator key with scope, and has the server
// follow it.
func (e *env) pushScopedRoot(op *signature.Signer, scope *schemas.TrustScope) {
	t := e.t
	t.Helper()
	_, rootPriv, _ := ed25519.GenerateKey(rand.Reader)
	rootKey, err := ssh.NewSignerFromKey(rootPriv)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }
	tr := schemas.TrustRoot{
		APIVersion: schemas.APIVersion, Kind: schemas.KindTrustRoot, Version: 1,
		Expires: time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339),
		Root:    schemas.TrustRootRole{Threshold: 1, Keys: []schemas.TrustRootKey{{Name: "root-1", Key: auth(rootKey.PublicKey())}}},
		Roles: schemas.TrustRoles{
			Render:    schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "render", Key: auth(e.keys["render"].PublicKey())}}},
			Operators: &schemas.TrustRole{Threshold: 1, Keys: []schemas.TrustKey{{Name: "support", Key: auth(op.PublicKey()), Scope: scope}}},
		},
	}
	raw, err := trust.Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := trust.Parse(trust.FileName(1), raw)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = trust.Sign(r, rootKey); err != nil {
		t.Fatal(err)
	}
	e.pushMain("trust root with a scoped operator", func(work string) {
		if err := os.MkdirAll(filepath.Join(work, trust.Dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, trust.FileName(1)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		e.mustGit(work, "add", ".")
	})
}

// TestRolloutControlScope: with a trust root on main, a rollout request
// must be within the operator key's scope: a scope of other channels, of
// request kinds (which cannot name "rollout" yet) or of install labels (a
// rollout moves a whole channel) refuses it; a scope of its channel
// allows it.
func TestRolloutControlScope(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope *schemas.TrustScope
		code  int
		want  string
	}{
		{"another channel", &schemas.TrustScope{Channels: []string{"beta"}}, http.StatusForbidden, "outside the key's scope"},
		{"logs only", &schemas.TrustScope{RequestKinds: []string{"logs"}}, http.StatusForbidden, "outside the key's scope"},
		{"tier gold installs", &schemas.TrustScope{InstallLabels: map[string]string{"tier": "gold"}}, http.StatusForbidden, "outside the key's scope"},
		{"channel stable", &schemas.TrustScope{Channels: []string{"stable"}}, http.StatusOK, `"phase":"paused"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			op, _ := loadKey(t, "operator")
			startCanary(t, e, "1h")
			e.pushScopedRoot(op, tc.scope)
			tip := e.serverRef(schemas.RolloutRef("stable"))
			sub, _ := rolloutRequest(t, op, "support", "stable", schemas.RolloutPause, "r-scope", time.Now())
			code, out := e.postRollout(op, sub)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("%d %s, want %d %q", code, out, tc.code, tc.want)
			}
			if moved := e.serverRef(schemas.RolloutRef("stable")) != tip; moved != (tc.code == http.StatusOK) {
				t.Fatalf("rollout ref moved: %v", moved)
			}
		})
	}
}
