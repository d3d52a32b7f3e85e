package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/internal/gitobj"
	"nuon.dev/nuon/internal/gitrepo"
	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/internal/signature"
	"nuon.dev/nuon/requests"
	"nuon.dev/nuon/schemas"
)

// operators: alice's key is trusted for requests (trust/requests on main
// and the agent's own request trust); mallory's is not.
func operators(t *testing.T, tn *tenant) (alice, mallory *signature.Signer, trust *signature.AllowedSigners) {
	t.Helper()
	var err error
	if alice, err = signature.LoadSigner(filepath.Join(fixtureKeys, "initech")); err != nil {
		t.Fatal(err)
	}
	if mallory, err = signature.LoadSigner(filepath.Join(fixtureKeys, "globex")); err != nil {
		t.Fatal(err)
	}
	if trust, err = signature.ParseAllowedSigners([]byte("alice " + alice.AuthorizedKey() + "\n")); err != nil {
		t.Fatal(err)
	}
	tn.write(requests.TrustFile, "alice "+alice.AuthorizedKey()+"\n")
	tn.commit("trust alice for requests")
	return alice, mallory, trust
}

func newRequest(id, install, typ, component string, words ...string) *schemas.Request {
	now := time.Now().UTC().Truncate(time.Second)
	r := &schemas.Request{APIVersion: schemas.APIVersion, Kind: schemas.KindRequest, ID: id, Install: install, Type: typ,
		Component: component, Requester: "alice", Created: now, Deadline: now.Add(time.Hour)}
	if typ == schemas.RequestDebug {
		r.Command = words
	} else {
		r.Logs = &schemas.LogsRequest{Tail: 50}
	}
	return r
}

// fileRequest commits r on the requests ref of the tenant, signed by s.
func (tn *tenant) fileRequest(r *schemas.Request, s *signature.Signer) plumbing.Hash {
	tn.t.Helper()
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		tn.t.Fatal(err)
	}
	head, _ := repo.Ref(plumbing.ReferenceName(requests.Ref))
	b := gitobj.NewBatch()
	h, err := requests.File(b, r, head, s)
	if err != nil {
		tn.t.Fatal(err)
	}
	if err := b.Flush(repo.Storer()); err != nil {
		tn.t.Fatal(err)
	}
	tn.git("update-ref", requests.Ref, h.String())
	return h
}

// signedRequest is r as the renderer would render it, whoever signed it.
func (tn *tenant) signedRequest(r *schemas.Request, s *signature.Signer) schemas.SignedRequest {
	tn.t.Helper()
	h := tn.fileRequest(r, s)
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		tn.t.Fatal(err)
	}
	filed, err := requests.Read(repo.Storer(), h, nil)
	if err != nil {
		tn.t.Fatal(err)
	}
	return filed[0].Signed
}

// injectRequests writes a desired commit for acme signed by the render
// key, as a compromised renderer could: acme's tree with requests.json
// holding rs, whatever their signatures or install.
func (tn *tenant) injectRequests(t *testing.T, rs ...schemas.SignedRequest) {
	t.Helper()
	repo, err := gitrepo.Open(tn.bare)
	if err != nil {
		t.Fatal(err)
	}
	ref := schemas.InstallRef("acme")
	tip, err := repo.Ref(plumbing.ReferenceName(ref))
	if err != nil {
		t.Fatal(err)
	}
	c, err := gitobj.ReadCommit(repo.Storer(), tip)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := gitobj.ReadTree(repo.Storer(), c.TreeHash)
	if err != nil {
		t.Fatal(err)
	}
	data, err := requests.Encode(rs)
	if err != nil {
		t.Fatal(err)
	}
	b := gitobj.NewBatch()
	var entries []gitobj.Entry
	for _, e := range tree.Entries {
		if e.Name != schemas.RequestsFile {
			entries = append(entries, gitobj.Entry{Name: e.Name, Mode: e.Mode, Hash: e.Hash})
		}
	}
	entries = append(entries, gitobj.Entry{Name: schemas.RequestsFile, Mode: filemode.Regular, Hash: b.Add(plumbing.BlobObject, data)})
	gen, _ := schemas.Trailer(c.Message, schemas.TrailerGeneration)
	var n int
	if err := json.Unmarshal([]byte(gen), &n); err != nil {
		t.Fatal(err)
	}
	h, err := b.Commit(gitobj.Commit{Tree: b.Tree(entries), Parents: []plumbing.Hash{tip},
		Author: object.Signature{Name: "r", Email: "r@x", When: time.Now()}, Message: bumpGeneration(c.Message, n+1)}, tn.render)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(repo.Storer()); err != nil {
		t.Fatal(err)
	}
	tn.git("update-ref", ref, h.String())
}

func answerOf(t *testing.T, tn *tenant, st schemas.Status, id string) (schemas.RequestState, string) {
	t.Helper()
	rs, ok := st.Requests[id]
	if !ok {
		t.Fatalf("request %s not in the status: %+v", id, st.Requests)
	}
	if rs.Answer == "" {
		return rs, ""
	}
	return rs, tn.git("show", schemas.StatusRef("acme")+":"+rs.Answer)
}

// TestRequestsAnswered: a logs request and a debug command are answered
// once, in the status tree, redacted; a command off the allow-list is
// refused by the agent before any job; an untrusted request never reaches
// the agent; a restarted agent runs nothing again.
func TestRequestsAnswered(t *testing.T) {
	tn := newTenant(t)
	alice, mallory, trust := operators(t, tn)
	tn.renderMain()
	secret := "hunter2-very-secret"
	secretEnv := "NUON_SECRET_LEAK=" + secret
	dir := t.TempDir()
	opts := func(c *agent.Config) {
		c.RequestTrust = trust
		c.Environ = []string{secretEnv}
		c.Runner.(*jobs.Local).Env = append(c.Runner.(*jobs.Local).Env, secretEnv)
	}
	a := tn.agentIn("acme", dir, opts)
	a.reconcile(t) // apply everything first

	tn.fileRequest(newRequest("r-logs", "acme", schemas.RequestLogs, "a"), alice)
	tn.fileRequest(newRequest("r-debug", "acme", schemas.RequestDebug, "a", "state", "list"), alice)
	tn.fileRequest(newRequest("r-shell", "acme", schemas.RequestDebug, "a", "sh", "-c", "cat /etc/passwd"), alice)
	tn.fileRequest(newRequest("r-mallory", "acme", schemas.RequestDebug, "a", "state", "list"), mallory)
	tn.renderMain()
	st := a.reconcile(t).Status

	rs, text := answerOf(t, tn, st, "r-logs")
	if rs.State != schemas.RequestAnswered || rs.Requester != "alice" || !strings.Contains(text, "job") {
		t.Errorf("logs: %+v\n%s", rs, text)
	}
	rs, text = answerOf(t, tn, st, "r-debug")
	if rs.State != schemas.RequestAnswered || !strings.Contains(text, "a: state list") || rs.Job == "" {
		t.Errorf("debug: %+v\n%s", rs, text)
	}
	if strings.Contains(text, secret) || !strings.Contains(text, redact.Marker) {
		t.Errorf("debug answer not redacted:\n%s", text)
	}
	if rs, _ := answerOf(t, tn, st, "r-shell"); rs.State != schemas.RequestRefused || !strings.Contains(rs.Reason, "sh") {
		t.Errorf("shell: %+v", rs)
	}
	if _, ok := st.Requests["r-mallory"]; ok {
		t.Errorf("an untrusted request reached the agent: %+v", st.Requests["r-mallory"])
	}
	msg := tn.git("log", "-1", "--format=%B", schemas.StatusRef("acme"))
	if !strings.Contains(msg, "request r-debug (debug from alice) answered") || strings.Contains(msg, "a: state list") {
		t.Errorf("status message should name the answer, not hold it:\n%s", msg)
	}

	// A restarted agent: nothing runs again.
	debugs := func() int { return strings.Count(strings.Join(runs(t, a.records), "\n"), "_debug") }
	before := debugs()
	b := tn.agentIn("acme", dir, opts)
	if rep := b.reconcile(t); !rep.Idle {
		t.Errorf("a restarted agent wrote a status: %s", rep.Outcome)
	}
	if after := debugs(); after != before || before != 1 {
		t.Errorf("debug jobs: %d before the restart, %d after; want 1 and 1", before, after)
	}
}

// TestRequestsRefused: whatever the renderer hands over, the agent
// refuses a request signed by a key it does not trust, one for another
// install, one past its deadline, and a kind the install turned off.
func TestRequestsRefused(t *testing.T) {
	tn := newTenant(t)
	alice, mallory, trust := operators(t, tn)
	inst, err := os.ReadFile(filepath.Join(tn.src, "installs/acme.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tn.write("installs/acme.yaml", string(inst)+"operations: {debug: false}\n")
	tn.commit("acme turns debug off")
	tn.renderMain()
	clk := &clock{now: time.Now()}
	a := tn.agent("acme", func(c *agent.Config) { c.RequestTrust = trust; c.Now = clk.Now })
	a.reconcile(t)

	expired := newRequest("r-late", "acme", schemas.RequestLogs, "a")
	tn.injectRequests(t,
		tn.signedRequest(newRequest("r-mallory", "acme", schemas.RequestLogs, "a"), mallory),
		tn.signedRequest(newRequest("r-globex", "globex", schemas.RequestLogs, "a"), alice),
		tn.signedRequest(expired, alice),
		tn.signedRequest(newRequest("r-vetoed", "acme", schemas.RequestDebug, "a", "state", "list"), alice),
	)
	clk.Set(time.Now())
	st := a.reconcile(t).Status
	for id, want := range map[string]string{
		"r-mallory": "signature does not verify",
		"r-globex":  `for install "globex", not "acme"`,
		"r-vetoed":  "turned off by the install's own operations settings",
	} {
		if rs, _ := answerOf(t, tn, st, id); rs.State != schemas.RequestRefused || !strings.Contains(rs.Reason, want) {
			t.Errorf("%s: %+v, want refused: %s", id, rs, want)
		}
	}
	if !slices.Equal(st.Vetoed, []string{schemas.RequestDebug}) {
		t.Errorf("vetoed = %v, want [debug]", st.Vetoed)
	}
	if rs, ok := st.Requests["r-late"]; !ok || rs.State != schemas.RequestAnswered {
		t.Errorf("r-late before its deadline: %+v", rs)
	}

	// Past the deadline, a request the agent has not seen is refused.
	late := newRequest("r-later", "acme", schemas.RequestLogs, "a")
	tn.injectRequests(t, tn.signedRequest(late, alice))
	clk.Set(late.Deadline.Add(time.Minute))
	st = a.reconcile(t).Status
	if rs, _ := answerOf(t, tn, st, "r-later"); rs.State != schemas.RequestRefused || !strings.Contains(rs.Reason, "expired") {
		t.Errorf("r-later: %+v, want refused as expired", rs)
	}
	if got := runs(t, a.records); slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "_debug") }) {
		t.Errorf("a refused request ran a job: %v", got)
	}
}

// TestRequestsRefusedWithoutRequestTrust: an agent started without
// operator keys refuses every request with a reason that names the flag
// that fixes it.
func TestRequestsRefusedWithoutRequestTrust(t *testing.T) {
	tn := newTenant(t)
	alice, _, _ := operators(t, tn)
	tn.renderMain()
	a := tn.agent("acme")
	a.reconcile(t)
	tn.injectRequests(t, tn.signedRequest(newRequest("r-untrusted", "acme", schemas.RequestLogs, "a"), alice))
	st := a.reconcile(t).Status
	rs, _ := answerOf(t, tn, st, "r-untrusted")
	if rs.State != schemas.RequestRefused || rs.Reason != agent.NoRequestTrust || !strings.Contains(rs.Reason, "--request-trust") {
		t.Errorf("r-untrusted: %+v, want refused naming --request-trust", rs)
	}
}
