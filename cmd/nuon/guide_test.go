package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/internal/kubetest"
	"nuon.dev/nuon/internal/testenv"
)

// The operator's guide (docs/operators-guide.md) is run as written: its
// shell blocks fenced ```sh test (the fast steps) and ```sh
// test-walkthrough (the steps that need agents and sandboxes) are
// extracted and run in order, each in a fresh bash -euo pipefail that
// sources the environment's env file first, all in one working folder.

// guidePath is the guide, from the repository's root.
const guidePath = "docs/operators-guide.md"

// walkthroughEnv, set to 1, makes TestOperatorsGuide run the whole guide
// against `hack/demo.sh --up` (about four minutes on the project's
// machine) instead of its fast steps against a tenant and a nuon server.
const walkthroughEnv = "NUON_GUIDE_WALKTHROUGH"

// The fence info strings of the blocks the test runs.
const (
	blockFast        = "sh test"
	blockWalkthrough = "sh test-walkthrough"
)

// guideBlock is one runnable shell block of the guide.
type guideBlock struct {
	section string // the heading above it
	line    int    // the line of its opening fence
	kind    string // blockFast or blockWalkthrough
	code    string
}

// name is how the test's log and BENCHMARKS.md name the block: its
// section and its first command.
func (b guideBlock) name() string {
	first := ""
	for l := range strings.SplitSeq(b.code, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			first = l
			break
		}
	}
	if len(first) > 60 {
		first = first[:57] + "..."
	}
	return fmt.Sprintf("%s: %s", b.section, first)
}

// parseGuide returns the runnable blocks of a Markdown guide, in order.
// Other fences (```sh alone: what a person runs, not the test) are
// skipped. An unclosed fence is an error.
func parseGuide(md string) ([]guideBlock, error) {
	var (
		blocks  []guideBlock
		section string
		cur     *guideBlock
		inFence bool
		body    strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(md))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case inFence && strings.HasPrefix(line, "```"):
			inFence = false
			if cur != nil {
				cur.code = body.String()
				blocks = append(blocks, *cur)
				cur = nil
			}
			body.Reset()
		case inFence:
			body.WriteString(line + "\n")
		case strings.HasPrefix(line, "```"):
			inFence = true
			switch info := strings.TrimSpace(strings.TrimPrefix(line, "```")); info {
			case blockFast, blockWalkthrough:
				cur = &guideBlock{section: section, line: n, kind: info}
			}
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	if inFence {
		return nil, fmt.Errorf("%s: a fence is not closed", guidePath)
	}
	return blocks, sc.Err()
}

func readGuide(t *testing.T) []guideBlock {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(repoRoot(), guidePath))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parseGuide(string(md))
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestOperatorsGuideBlocks checks the extraction: the guide has blocks of
// both kinds, in the sections it promises, and each is valid bash.
func TestOperatorsGuideBlocks(t *testing.T) {
	blocks := readGuide(t)
	kinds := map[string]int{}
	sections := map[string]bool{}
	for _, b := range blocks {
		kinds[b.kind]++
		sections[b.section] = true
		cmd := exec.Command("bash", "-n")
		cmd.Stdin = strings.NewReader(b.code)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s:%d (%s): not valid bash: %v\n%s", guidePath, b.line, b.section, err, out)
		}
	}
	if kinds[blockFast] == 0 || kinds[blockWalkthrough] == 0 {
		t.Errorf("blocks by kind %v: want both %q and %q", kinds, blockFast, blockWalkthrough)
	}
	for _, s := range []string{"The fleet view", "What each state means", "Trusting operators", "Logs and debug",
		"Drift and heartbeat", "Creating an install", "Restarting an agent", "Re-pointing an agent", "Rollouts", "Approvals",
		"Deleting an install"} {
		if !sections[s] {
			t.Errorf("no runnable block in section %q", s)
		}
	}

	got, err := parseGuide("# A\n```sh\nnot run\n```\n## B\n```sh test\necho 1\n```\n```sh test-walkthrough\necho 2\necho 3\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].section != "B" || got[0].code != "echo 1\n" || got[1].kind != blockWalkthrough || got[1].line != 9 {
		t.Errorf("parseGuide: %+v", got)
	}
	if _, err := parseGuide("```sh test\necho\n"); err == nil {
		t.Error("parseGuide: an unclosed fence is no error")
	}
}

// TestOperatorsGuide runs the guide's steps in order against a real
// environment and logs each step's time. By default it runs the fast
// steps (```sh test) against the sample tenant in a bare repository and
// the real nuon server rendering it, with the fleet view on, and no
// agents: what make test runs, in some seconds. With
// NUON_GUIDE_WALKTHROUGH=1 it runs every step against hack/demo.sh --up:
// three installs' agents, sandboxes and the vendor registry, through the
// server, as an operator would after make demo-up.
func TestOperatorsGuide(t *testing.T) {
	blocks := readGuide(t)
	walkthrough := os.Getenv(walkthroughEnv) == "1"
	var envFile string
	if walkthrough {
		envFile = demoUp(t)
	} else {
		envFile = guideTenant(t)
	}
	work := t.TempDir()
	// The guide makes an install of its own in work (hooli) and deletes it
	// at its end; a step that fails before leaves its agent and sandbox
	// running: stop them as make demo-down stops the demo's.
	t.Cleanup(func() { stopGuideInstalls(t, work) })
	env := append(os.Environ(),
		"GIT_AUTHOR_NAME=Support Engineer", "GIT_AUTHOR_EMAIL=support@vendor.example",
		"GIT_COMMITTER_NAME=Support Engineer", "GIT_COMMITTER_EMAIL=support@vendor.example")

	type timing struct {
		name string
		d    time.Duration
	}
	var times []timing
	start := time.Now()
	for _, b := range blocks {
		if b.kind == blockWalkthrough && !walkthrough {
			continue
		}
		script := fmt.Sprintf(". %q\n%s", envFile, b.code)
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		times = append(times, timing{b.name(), d})
		if err != nil {
			t.Fatalf("%s:%d (%s) failed after %v: %v\n--- the step ---\n%s--- its output ---\n%s", guidePath, b.line, b.section, d.Round(time.Millisecond), err, b.code, out.String())
		}
		t.Logf("%s:%d %s (%v)\n%s", guidePath, b.line, b.name(), d.Round(time.Millisecond), indent(out.String()))
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "%d steps in %v (walkthrough %v):\n", len(times), time.Since(start).Round(time.Millisecond), walkthrough)
	for _, tm := range times {
		fmt.Fprintf(&sum, "| %s | %.2f s |\n", tm.name, tm.d.Seconds())
	}
	t.Log(sum.String())
}

// stopGuideInstalls stops the agent (its whole session) and the local
// sandbox of every install folder the guide left in work.
func stopGuideInstalls(t *testing.T, work string) {
	dirs, _ := filepath.Glob(filepath.Join(work, "*", "agent.pid"))
	for _, pidFile := range dirs {
		d := filepath.Dir(pidFile)
		if pid, err := os.ReadFile(pidFile); err == nil {
			_ = exec.Command("kill", "--", "-"+strings.TrimSpace(string(pid))).Run()
		}
		for _, c := range [][]string{
			{filepath.Join(d, "sandbox", "module", "kube-down.sh"), filepath.Join(d, "sandbox", "run", "kube")},
			{filepath.Join(d, "sandbox", "module", "registry.sh"), "down", filepath.Join(d, "sandbox", "run", "registry")},
		} {
			if _, err := os.Stat(c[0]); err == nil {
				if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
					t.Logf("stop %s: %v\n%s", d, err, out)
				}
			}
		}
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// guideTenant is the fast steps' environment: the sample tenant on main
// of a bare repository and nuon server rendering it with the fleet view
// on; it writes the env file the guide's blocks source, with the same
// names as the demo's, and returns its path.
func guideTenant(t *testing.T) string {
	t.Helper()
	root := repoRoot()
	keys := filepath.Join(root, "fixtures", "keys")
	bin := nuonBinary(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "tenant.git")
	gittest.InitBare(t, repo)
	commitTenant(t, repo, nil)
	token, hookSecret := filepath.Join(dir, "view-token"), filepath.Join(dir, "hook-secret")
	for f, v := range map[string]string{token: "guide-view-token\n", hookSecret: "guide-hook-secret-0123456789\n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The agents' copy of trust/requests (there are none here).
	signers, err := os.ReadFile(filepath.Join(root, "fixtures", "tenant", "trust", "requests"))
	if err != nil {
		t.Fatal(err)
	}
	requestTrust := filepath.Join(dir, "request_signers")
	if err := os.WriteFile(requestTrust, signers, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, bin, nil, "--repo", repo, "--render-key", filepath.Join(keys, "render"),
		"--poll-interval", "200ms", "--view-token-file", token, "--hook-secret-file", hookSecret)
	srv.waitReady(t, time.Minute)
	vars := [][2]string{
		{"PATH", filepath.Dir(bin) + ":" + os.Getenv("PATH")},
		{"NUON_REPO", repo},
		{"NUON_SERVER_URL", srv.url},
		{"NUON_FLEET_URL", srv.url + "/fleet"},
		{"NUON_VIEW_TOKEN_FILE", token},
		{"NUON_HOOK_SECRET_FILE", hookSecret},
		{"NUON_RENDER_KEY", filepath.Join(keys, "render")},
		{"NUON_OPERATOR_KEY", filepath.Join(keys, "operator")},
		{"NUON_VENDOR_KEY", filepath.Join(keys, "cosign.pub")},
		{"NUON_REQUEST_TRUST", requestTrust},
		{"NUON_APPROVER_KEY", filepath.Join(keys, "approver")},
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "export %s=%q\n", v[0], v[1])
	}
	envFile := filepath.Join(dir, "env")
	if err := os.WriteFile(envFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return envFile
}

// demoUp runs hack/demo.sh --up with the test's binaries and returns its
// env file; the demo goes down when the test ends.
func demoUp(t *testing.T) string {
	t.Helper()
	root := repoRoot()
	assets, err := kubetest.Assets()
	if err != nil {
		testenv.Missing(t, "the walkthrough needs the kube binaries: %v", err)
	}
	tf := testenv.TerraformConfig(t)
	bin := nuonBinary(t)
	agentBinary(t)
	demo := filepath.Join(t.TempDir(), "demo")
	env := append(os.Environ(), "NUON_KUBE_ASSETS="+assets, "NUON_TF_CLI_CONFIG="+tf, "TF_CLI_CONFIG_FILE="+tf)
	down := func() {
		cmd := exec.Command(filepath.Join(root, "hack", "demo.sh"), "--down", demo)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("demo.sh --down: %v\n%s", err, out)
		}
	}
	t.Cleanup(down)
	cmd := exec.Command(filepath.Join(root, "hack", "demo.sh"), "--up", bin, demo)
	cmd.Env = env
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh --up: %v\n%s", err, out)
	}
	// What demo-up prints for the operator: how to reach each piece.
	reach := string(out)
	if i := strings.LastIndex(reach, "the demo stays up"); i >= 0 {
		reach = reach[i:]
	}
	t.Logf("demo.sh --up: %v\n%s", time.Since(t0).Round(time.Millisecond), indent(reach))
	return filepath.Join(demo, "env")
}
