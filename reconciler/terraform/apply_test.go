package terraform

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/internal/redact"
	"nuon.dev/nuon/reconciler"
	"nuon.dev/nuon/schemas"
)

// allSteps collects the step timings of every test that runs terraform.
var allSteps = &stepRecorder{}

func TestMain(m *testing.M) {
	code := m.Run()
	if testing.Verbose() {
		if s := allSteps.String(); s != "" {
			os.Stdout.WriteString("terraform step timings:\n" + s)
		}
	}
	os.Exit(code)
}

// TestLifecycle runs the sample app's two components through create,
// no-op, update and destroy, the database fed by the network's output.
func TestLifecycle(t *testing.T) {
	p := realPlugin(t, nil)
	networkDir, databaseDir, dataDir := t.TempDir(), t.TempDir(), t.TempDir()
	configFile := filepath.Join(dataDir, "app.json")

	var vpcID string
	networkInputs := func(tags map[string]any) map[string]any {
		return map[string]any{"name": "main", "cidr": "10.1.0.0/16", "tags": tags}
	}
	databaseInputs := func(port int) map[string]any {
		return map[string]any{"vpc_id": vpcID, "dir": dataDir, "port": port}
	}

	steps := []struct {
		name        string
		component   string
		stateDir    string
		inputs      func() map[string]any
		destroy     bool
		wantChanged bool
		check       func(t *testing.T, res *schemas.JobResult, env testEnv)
	}{
		{
			name:        "create network",
			component:   "network",
			stateDir:    networkDir,
			inputs:      func() map[string]any { return networkInputs(nil) },
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, env testEnv) {
				vpcID, _ = res.Outputs["vpc_id"].(string)
				if !strings.HasPrefix(vpcID, "vpc-") {
					t.Errorf("vpc_id = %v, want vpc-…", res.Outputs["vpc_id"])
				}
				if diff := cmp.Diff([]string{"peering_token"}, res.Sensitive); diff != "" {
					t.Errorf("Sensitive (-want +got):\n%s", diff)
				}
				checkSecretKept(t, res, env, networkDir, "peering_token")
			},
		},
		{
			name:        "create database",
			component:   "database",
			stateDir:    databaseDir,
			inputs:      func() map[string]any { return databaseInputs(5432) },
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, env testEnv) {
				want := map[string]any{
					"endpoint":    "app." + vpcID + ".internal:5432",
					"config_file": configFile,
				}
				if diff := cmp.Diff(want, res.Outputs); diff != "" {
					t.Errorf("Outputs (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"password"}, res.Sensitive); diff != "" {
					t.Errorf("Sensitive (-want +got):\n%s", diff)
				}
				checkSecretKept(t, res, env, databaseDir, "password")
				b, err := os.ReadFile(configFile)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), vpcID) {
					t.Errorf("%s = %s, want the vpc_id %s", configFile, b, vpcID)
				}
			},
		},
		{
			name:      "re-apply database",
			component: "database",
			stateDir:  databaseDir,
			inputs:    func() map[string]any { return databaseInputs(5432) },
			check: func(t *testing.T, res *schemas.JobResult, _ testEnv) {
				if got, want := res.Outputs["endpoint"], "app."+vpcID+".internal:5432"; got != want {
					t.Errorf("endpoint = %v, want %v", got, want)
				}
			},
		},
		{
			name:        "update database port",
			component:   "database",
			stateDir:    databaseDir,
			inputs:      func() map[string]any { return databaseInputs(6432) },
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, _ testEnv) {
				if got, want := res.Outputs["endpoint"], "app."+vpcID+".internal:6432"; got != want {
					t.Errorf("endpoint = %v, want %v", got, want)
				}
			},
		},
		{
			name:        "update network tags",
			component:   "network",
			stateDir:    networkDir,
			inputs:      func() map[string]any { return networkInputs(map[string]any{"team": "data"}) },
			wantChanged: true,
			check: func(t *testing.T, res *schemas.JobResult, _ testEnv) {
				if got := res.Outputs["vpc_id"]; got != vpcID {
					t.Errorf("vpc_id = %v after a tag change, want %v kept", got, vpcID)
				}
			},
		},
		{
			name:      "destroy database",
			component: "database",
			stateDir:  databaseDir,
			inputs:    func() map[string]any { return databaseInputs(6432) },
			destroy:   true,
			check: func(t *testing.T, _ *schemas.JobResult, _ testEnv) {
				if _, err := os.Stat(configFile); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after destroy: %v, want it removed", configFile, err)
				}
				checkEmptyState(t, databaseDir)
			},
		},
		{
			name:      "destroy network",
			component: "network",
			stateDir:  networkDir,
			inputs:    func() map[string]any { return networkInputs(nil) },
			destroy:   true,
			check: func(t *testing.T, _ *schemas.JobResult, _ testEnv) {
				checkEmptyState(t, networkDir)
			},
		},
		{
			name:      "destroy database again",
			component: "database",
			stateDir:  databaseDir,
			inputs:    func() map[string]any { return databaseInputs(6432) },
			destroy:   true,
			check: func(t *testing.T, _ *schemas.JobResult, _ testEnv) {
				checkEmptyState(t, databaseDir)
			},
		},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			env := newEnv(s.stateDir)
			defer allSteps.merge(env.steps)
			job := newJob(s.component, fixture(s.component), s.inputs())
			var res *schemas.JobResult
			var err error
			if s.destroy {
				job.Operation = schemas.OpDelete
				err = p.Destroy(t.Context(), job, env.Env)
			} else {
				res, err = p.Apply(t.Context(), job, env.Env)
			}
			if err != nil {
				t.Fatalf("%v\nterraform's log:\n%s", err, env.log)
			}
			if res != nil && res.Changed != s.wantChanged {
				t.Errorf("Changed = %v, want %v\nterraform's log:\n%s", res.Changed, s.wantChanged, env.log)
			}
			s.check(t, res, env)
			for _, f := range []string{planFile, varFile} {
				if _, err := os.Stat(filepath.Join(s.stateDir, moduleDir, f)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s left after the job: %v", f, err)
				}
			}
		})
		if !ok {
			t.FailNow()
		}
	}
}

// checkSecretKept checks that the sensitive output's value, which the state
// holds, is neither in the JSON result nor in terraform's log.
func checkSecretKept(t *testing.T, res *schemas.JobResult, env testEnv, stateDir, output string) {
	t.Helper()
	st := readState(t, stateDir)
	o, ok := st.Outputs[output]
	if !ok || !o.Sensitive {
		t.Fatalf("state output %s = %+v, want a sensitive output", output, o)
	}
	secret, _ := o.Value.(string)
	if len(secret) < 8 {
		t.Fatalf("state output %s = %q, want a generated secret", output, secret)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the result holds the sensitive %s: %s", output, b)
	}
	if strings.Contains(env.log.String(), secret) {
		t.Errorf("terraform's log holds the sensitive %s:\n%s", output, env.log)
	}
}

func checkEmptyState(t *testing.T, stateDir string) {
	t.Helper()
	st := readState(t, stateDir)
	if len(st.Resources) != 0 || len(st.Outputs) != 0 {
		t.Errorf("state after destroy has %d resources and %d outputs, want none", len(st.Resources), len(st.Outputs))
	}
}

func TestApplySecrets(t *testing.T) {
	const license = `lic-"s3cr3t"-0042`
	tests := []struct {
		name    string
		secrets map[string]string
		wantErr string
	}{
		{
			name:    "resolved",
			secrets: map[string]string{"NUON_SECRET_LICENSE_KEY": license},
		},
		{
			name:    "missing",
			secrets: map[string]string{"NUON_SECRET_OTHER": license},
			wantErr: "terraform inputs database: input license_key: secret missing: license-key (NUON_SECRET_LICENSE_KEY is not set)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := realPlugin(t, tt.secrets)
			stateDir, dataDir := t.TempDir(), t.TempDir()
			env := newEnv(stateDir)
			defer allSteps.merge(env.steps)
			job := newJob("database", fixture("database"), map[string]any{
				"vpc_id":      "vpc-test",
				"dir":         dataDir,
				"license_key": "${secrets.license-key}",
			})
			res, err := p.Apply(t.Context(), job, env.Env)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Apply error = %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, reconciler.ErrSecretMissing) {
					t.Errorf("errors.Is(%v, reconciler.ErrSecretMissing) = false", err)
				}
				if _, err := os.Stat(filepath.Join(stateDir, stateFile)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("state after a missing secret: %v, want none", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\nterraform's log:\n%s", err, env.log)
			}
			b, err := os.ReadFile(filepath.Join(dataDir, "app.json"))
			if err != nil {
				t.Fatal(err)
			}
			var config struct {
				LicenseKey string `json:"license_key"`
			}
			if err := json.Unmarshal(b, &config); err != nil {
				t.Fatal(err)
			}
			if config.LicenseKey != license {
				t.Errorf("license_key in the config = %q, want %q", config.LicenseKey, license)
			}
			// The plugin's result holds no secret; its log does, as
			// terraform prints it, and the job process's redactor (package
			// jobrun) finds it in terraform's own spelling.
			out, _ := json.Marshal(res)
			red, err := redact.New(tt.secrets)
			if err != nil {
				t.Fatal(err)
			}
			log := red.String(env.log.String())
			for _, leak := range []string{license, "s3cr3t"} {
				if strings.Contains(log, leak) {
					t.Errorf("terraform's redacted log holds the secret (%q):\n%s", leak, log)
				}
				if strings.Contains(string(out), leak) {
					t.Errorf("the result holds the secret (%q): %s", leak, out)
				}
			}
			if !strings.Contains(log, redact.Marker) {
				t.Errorf("terraform's log shows no %s where the plan prints the secret:\n%s", redact.Marker, log)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name      string
		job       *schemas.Job
		wantErr   string // prefix
		wantInErr string
	}{
		{
			name:      "syntax",
			job:       newJob("syntax", testModule("syntax"), nil),
			wantErr:   "terraform init syntax: ",
			wantInErr: "Invalid expression",
		},
		{
			name:      "precondition",
			job:       newJob("precondition", testModule("precondition"), nil),
			wantErr:   "terraform plan precondition: ",
			wantInErr: "replicas must be positive.",
		},
		{
			name:      "provisioner",
			job:       newJob("provisioner", testModule("provisioner"), nil),
			wantErr:   "terraform apply provisioner: ",
			wantInErr: "provisioning failed",
		},
		{
			name: "no module artifact",
			job: func() *schemas.Job {
				j := newJob("network", fixture("network"), nil)
				j.Artifacts = append(j.Artifacts, schemas.Artifact{Name: "chart"})
				j.Artifacts[0].Name = "other"
				return j
			}(),
			wantErr:   "terraform extract network: ",
			wantInErr: `no "module" artifact among 2: [other chart]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := realPlugin(t, nil)
			env := newEnv(t.TempDir())
			defer allSteps.merge(env.steps)
			_, err := p.Apply(t.Context(), tt.job, env.Env)
			if err == nil {
				t.Fatalf("Apply succeeded, want an error starting %q", tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("Apply error = %q, want it to start %q and hold %q", err, tt.wantErr, tt.wantInErr)
			}
		})
	}
}

// TestApplyStops checks that the end of the job's context stops terraform
// and what it runs, well within the grace period.
func TestApplyStops(t *testing.T) {
	tests := []struct {
		name string
		// ctx is the job's context; stop is called once the provisioner
		// runs.
		ctx     func(t *testing.T) (ctx context.Context, stop func())
		wantErr error
	}{
		{
			name: "cancel",
			ctx: func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithCancel(t.Context())
				t.Cleanup(cancel)
				return ctx, cancel
			},
			wantErr: context.Canceled,
		},
		{
			name: "deadline",
			ctx: func(t *testing.T) (context.Context, func()) {
				ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
				t.Cleanup(cancel)
				return ctx, func() {}
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	const grace = 20 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := realPlugin(t, nil)
			p.Grace = grace
			env := newEnv(t.TempDir())
			defer allSteps.merge(env.steps)
			pidFile := filepath.Join(t.TempDir(), "pid")
			job := newJob("slow", testModule("slow"), map[string]any{"pid_file": pidFile})

			ctx, stop := tt.ctx(t)
			ended := make(chan time.Time, 1)
			go func() {
				<-ctx.Done()
				ended <- time.Now()
			}()
			go func() {
				for ctx.Err() == nil {
					if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
						stop()
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()

			_, err := p.Apply(ctx, job, env.Env)
			took := time.Since(<-ended)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply error = %v, want %v\nterraform's log:\n%s", err, tt.wantErr, env.log)
			}
			if !strings.HasPrefix(err.Error(), "terraform apply slow: ") {
				t.Errorf("Apply error = %q, want it to start %q", err, "terraform apply slow: ")
			}
			t.Logf("terraform stopped %v after the context ended", took.Round(time.Millisecond))
			if took > grace/2 {
				t.Errorf("terraform took %v to stop, want well under the %v grace", took, grace)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for syscall.Kill(pid, 0) == nil {
				if time.Now().After(deadline) {
					t.Fatalf("the provisioner's process %d still runs after the job stopped", pid)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
