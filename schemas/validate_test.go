package schemas

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	testCommit = "0123456789abcdef0123456789abcdef01234567"
	testDigest = "sha256:fb4c1f5ba4e0dfa6111b9f9dadebc15404640ea0cfc9da1dba7eeacad73142d1"
)

func TestSchemasCompile(t *testing.T) {
	set, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(Files, ".")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
		raw, _ := set.raw[e.Name()].(map[string]any)
		if raw["$id"] != schemaBase+e.Name() {
			t.Errorf("%s: $id is %v, want %s", e.Name(), raw["$id"], schemaBase+e.Name())
		}
		if raw["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties must be false", e.Name())
		}
		if s, _ := raw["title"].(string); s == "" {
			t.Errorf("%s: no title", e.Name())
		}
		if s, _ := raw["description"].(string); s == "" {
			t.Errorf("%s: no description", e.Name())
		}
	}
	var named []string
	for name := range goTypes {
		named = append(named, name)
	}
	sort.Strings(named)
	if diff := cmp.Diff(named, files); diff != "" {
		t.Errorf("schema files (-Schema… constants +embedded):\n%s", diff)
	}
}

// TestPatternsDescribed checks that every pattern in the schemas is
// explained in words when a value does not match it.
func TestPatternsDescribed(t *testing.T) {
	set, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	var walk func(file string, v any)
	walk = func(file string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if p, ok := x["pattern"].(string); ok {
				if _, ok := patternHelp[p]; !ok {
					t.Errorf("%s: pattern %s has no entry in patternHelp", file, p)
				}
			}
			for _, e := range x {
				walk(file, e)
			}
		case []any:
			for _, e := range x {
				walk(file, e)
			}
		}
	}
	for file, raw := range set.raw {
		walk(file, raw)
	}
}

// TestNoPropertyNames keeps propertyNames out of the schemas: the validator
// reports its errors at a location that later checks overwrite. Key
// patterns are patternProperties with additionalProperties false instead.
func TestNoPropertyNames(t *testing.T) {
	entries, err := fs.ReadDir(Files, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(Files, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"propertyNames"`) {
			t.Errorf("%s uses propertyNames", e.Name())
		}
	}
}

// samples are fully populated values of every written file kind.
func samples() map[string]any {
	cloud := Cloud{Provider: "aws", Region: "us-east-1", AccountID: "111111111111"}
	sandbox := Sandbox{Name: "aws-eks", Version: "0.4.0", Inputs: map[string]any{"cluster_version": "1.31"},
		Role:  &SandboxRole{ARN: "arn:aws:iam::111111111111:role/nuon-acme-maintenance", ExternalID: "nuon-acme-5f2c"},
		State: &S3State{Bucket: "nuon-acme-state", Key: "sandbox/terraform.tfstate", Region: "us-east-1"}}
	artifact := Artifact{
		Name:      "chart",
		Source:    "registry.vendor.example/shop/charts/api@" + testDigest,
		Local:     "111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme/shop/charts/api@" + testDigest,
		Digest:    testDigest,
		MediaType: "application/vnd.cncf.helm.config.v1+json",
	}
	jobArtifact := artifact
	jobArtifact.Source = ""
	inputs := map[string]any{"replicas": 2, "database": map[string]any{"password": "${secrets.db_password}"}}
	terraform := &TerraformSettings{Timeout: "10m", Health: &TerraformHealth{Output: "healthy"}}
	helm := &HelmSettings{Release: "api", Namespace: "shop", Timeout: "5m", Wait: true}
	yes := true
	operations := &Operations{Logs: &yes, Debug: &yes, Drift: &yes}
	manifests := &ManifestSettings{Namespace: "shop", Wait: true, Recreate: true, Timeout: "1m"}
	approval := &ApprovalSettings{Mode: ApprovalAuto, AutoApprove: []string{ChangeNoop, ChangeCreate}, Require: []string{ChangeDelete}}
	planHash := "sha256:" + strings.Repeat("b", 64)
	grants := &PluginCapabilities{Network: true, Secrets: true, CloudRole: true, WritableState: true, Env: []string{"NUON_ZONE_DIR"}}
	plan := &PlanRecord{Component: "api", Hash: planHash, Spec: "sha256:" + strings.Repeat("a", 64), Job: "api-update-7", Size: 2048,
		Summary: PlanSummary{Create: []string{"random_pet.a"}, Update: []string{"local_file.b"}, Delete: []string{"local_file.c"},
			Replace: []string{"random_id.d"}, Truncated: 3, Counts: map[string]int{ChangeCreate: 1}},
		Diff: "- a\n+ b", DiffTruncated: true, Needs: "delete requires approval", Refused: []string{"alice: expired"}, Rejected: "bob",
		Denied: []string{"db would be destroyed"}, Warnings: []string{"a file would be destroyed"},
		Customer: "the customer's policy requires the customer's approval of a replace of db", CustomerApproved: []string{"acme-sre"}}
	return map[string]any{
		SchemaInstallState: InstallState{
			APIVersion: APIVersion, Kind: KindInstallState, Install: "acme", App: "shop", Channel: "stable",
			Cloud: cloud, Sandbox: sandbox, Registry: "111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme",
			Components: []string{"network", "database", "api"}, Operations: operations, Deleted: true,
		},
		SchemaComponentState: ComponentState{
			APIVersion: APIVersion, Kind: KindComponentState, Name: "api", Type: TypeHelm, Version: "2.4.0",
			DependsOn: []string{"database"}, Artifacts: []Artifact{artifact}, Inputs: inputs,
			Terraform: terraform, Helm: helm, Manifests: manifests,
			Drift:    &DriftSettings{Mode: DriftCorrect, Schedule: "30m"},
			Approval: approval,
			Plugin:   &PluginSettings{Name: "zonefile", Grants: grants},
		},
		SchemaInstallApprovals: InstallApprovals{APIVersion: APIVersion, Kind: KindInstallApprovals,
			Approvals: []SignedApproval{{File: "{}", Signature: "-----BEGIN SSH SIGNATURE-----"}}},
		SchemaApprovers: Approvers{
			APIVersion: APIVersion, Kind: KindApprovers, Threshold: 1,
			Scope: &TrustScope{InstallLabels: map[string]string{"ring": "1"}, Channels: []string{"stable"}, RequestKinds: []string{"logs"}},
			Keys: []TrustKey{{Name: "alice", Key: "ssh-ed25519 AAAA alice", NotBefore: "2030-01-01T00:00:00Z", NotAfter: "2031-01-01T00:00:00Z",
				Scope: &TrustScope{InstallLabels: map[string]string{"ring": "1"}, Channels: []string{"stable"}, RequestKinds: []string{"logs"}}}},
		},
		SchemaApproval: Approval{
			APIVersion: APIVersion, Kind: KindApproval, Install: "acme", Component: "api", Plan: planHash,
			Decision: DecisionApprove, Approver: "alice", Created: testExpires, Expires: testExpires.Add(time.Hour), Reason: "reviewed",
		},
		SchemaJob: Job{
			APIVersion: APIVersion, Kind: KindJob, ID: "api-update-7", Install: "acme", Component: "api",
			Operation: OpUpdate, Plugin: TypeHelm, Version: "2.4.0", Generation: 7, Commit: testCommit,
			Artifacts: []Artifact{jobArtifact}, Inputs: inputs, Terraform: terraform, Helm: helm, Manifests: manifests,
			Debug:   &DebugRequest{Command: []string{"logs", "api-7d9f", "--tail", "100"}, Namespaces: []string{"shop"}, MaxBytes: 4096, Timeout: "30s"},
			State:   &S3State{Bucket: "nuon-acme-state", Key: "sandbox/terraform.tfstate", Region: "us-east-1"},
			Plan:    &JobPlan{Mode: PlanRecordMode, Hash: planHash, Keep: planHash},
			Grants:  grants,
			Timeout: "5m", StateDir: "/var/lib/nuon/state/api", ResultFile: "/var/lib/nuon/jobs/api-update-7/result.json",
		},
		SchemaJobResult: JobResult{
			APIVersion: APIVersion, Kind: KindJobResult, Job: "api-update-7",
			Outputs: map[string]any{"endpoint": "db.internal:5432"}, Sensitive: []string{"password"},
			Changed: true, Error: "helm: timed out", Refused: true,
			Drift: []ResourceDrift{{
				Address: "local_file.config", Kind: "ConfigMap", Namespace: "shop", Name: "settings",
				Action: DriftChanged, Fields: []string{"data.theme"}, Diff: "- dark\n+ light",
			}},
			Health: &Health{Status: HealthFailed, Message: "1 of 2 not ready", Resources: []ResourceHealth{{
				Address: "output.healthy", Kind: "Deployment", Namespace: "shop", Name: "api",
				Status: HealthProgressing, Message: "Available: 0/2",
			}}},
			Answer:     &Answer{Command: []string{"logs", "api-7d9f"}, Output: "started\n", Truncated: true, Bytes: 9000},
			BrokenLock: &StateLock{ID: "40290185-f2dc-28ad-e50d-695851c37436", Operation: "OperationTypeApply", Who: "root@nuon-db-g1-x7k2p", Created: "2026-11-23T22:47:31.113906158Z"},
			Plan:       plan,
		},
		SchemaRequest: Request{
			APIVersion: APIVersion, Kind: KindRequest, ID: "r-1", Install: "acme", Type: RequestLogs, Component: "api",
			Requester: "alice", Created: testExpires, Deadline: testExpires.Add(time.Hour),
			Logs: &LogsRequest{Since: "1h", Tail: 100}, Command: []string{"get", "pods"},
		},
		SchemaCustomerPolicy: CustomerPolicy{
			APIVersion: APIVersion, Kind: KindCustomerPolicy, Timezone: "Europe/Berlin",
			Allow:           []CustomerWindow{{Name: "nights", Days: []string{"mon", "tue"}, Start: "22:00", Cron: "0 22 * * 1,2", Duration: "6h", Timezone: "UTC"}},
			Deny:            []CustomerWindow{{Name: "freeze", Days: []string{"sun"}, Start: "00:00", Cron: "0 0 15 12 *", Duration: "432h", Timezone: "UTC"}},
			Hold:            &CustomerHold{Reason: "audit"},
			Requests:        func() *bool { b := true; return &b }(),
			RequireApproval: &CustomerRequire{Components: []string{"db"}, Changes: []string{"delete"}},
			Approvers:       []CustomerApprover{{Name: "alice", Key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK alice"}},
		},
		SchemaInstallRequests: InstallRequests{APIVersion: APIVersion, Kind: KindInstallRequests, Requests: []SignedRequest{{File: "{}", Commit: "tree 0"}}},
		SchemaStatus: Status{
			APIVersion: APIVersion, Kind: KindStatus, Install: "acme", Desired: testCommit, Applied: testCommit,
			Generation: 7, Phase: InstallRefused,
			Refusal: &Refusal{Commit: testCommit, Reason: "generation 6 is older than the applied 7"},
			Stale:   true, Expires: &testExpires,
			Forged: &Forged{Commit: testCommit, Reason: "not signed by this install's key"},
			Deferred: &Deferred{Reason: DeferredWindow, Message: "no allow window is open; nights opens at 2030-01-01T22:00:00+01:00",
				Since: testExpires, Until: &testExpires, Commit: testCommit},
			Artifacts: ArtifactsUnverified,
			Vetoed:    []string{RequestDebug}, Heartbeat: &testExpires, HeartbeatEvery: "10m0s",
			Requests: map[string]RequestState{"r-1": {State: RequestAnswered, Type: RequestLogs, Component: "api", Requester: "alice",
				Deadline: testExpires, At: testExpires, Reason: "x", Answer: "answers/r-1.txt", Bytes: 10, Truncated: true, Job: "api-debug-1"}},
			Components: map[string]ComponentStatus{"api": {
				Phase: PhaseFailed, Version: "2.4.0", Digests: map[string]string{"chart": testDigest},
				Spec: "sha256:" + strings.Repeat("a", 64), Outputs: map[string]any{"url": "https://acme.shop.example"},
				Sensitive: []string{"token"}, Job: "api-update-7", Error: "helm: timed out",
				Health: &Health{Status: HealthProgressing, Message: "1 of 2 ready", Resources: []ResourceHealth{{
					Address: "output.healthy", Kind: "Deployment", Namespace: "shop", Name: "api", Status: HealthProgressing, Message: "Available: 0/2",
				}}},
				Drift:      []ResourceDrift{{Address: "local_file.config", Kind: "ConfigMap", Namespace: "shop", Name: "settings", Action: DriftMissing, Fields: []string{"content"}, Diff: "deleted outside terraform"}},
				Corrected:  true,
				BrokenLock: &StateLock{ID: "40290185-f2dc-28ad-e50d-695851c37436", Operation: "OperationTypeApply", Who: "root@nuon-db-g1-x7k2p", Created: "2026-11-23T22:47:31.113906158Z"},
				Plan:       plan,
			}},
		},
	}
}

var testExpires = time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)

// zeroByDesign are the fields a file always holds empty (see leftOut).
var zeroByDesign = map[string]bool{
	"Job.Artifacts.Source": true,
}

// assertPopulated fails when a field anywhere in v has its zero value, so
// that the samples exercise every field of the schemas.
func assertPopulated(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	if zeroByDesign[path] {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			t.Errorf("%s is nil", path)
			return
		}
		assertPopulated(t, path, v.Elem())
	case reflect.Struct:
		if tm, ok := v.Interface().(time.Time); ok {
			if tm.IsZero() {
				t.Errorf("%s is zero", path)
			}
			return
		}
		for i := range v.NumField() {
			assertPopulated(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("%s is empty", path)
		}
		if v.Kind() == reflect.Slice {
			for i := range v.Len() {
				assertPopulated(t, path, v.Index(i))
			}
		} else {
			for _, k := range v.MapKeys() {
				assertPopulated(t, path, v.MapIndex(k))
			}
		}
	default:
		if v.IsZero() {
			t.Errorf("%s is zero", path)
		}
	}
}

func TestValidateGoValues(t *testing.T) {
	for schema, v := range samples() {
		t.Run(schema, func(t *testing.T) {
			assertPopulated(t, reflect.TypeOf(v).Name(), reflect.ValueOf(v))
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateJSON(schema, data); err != nil {
				t.Errorf("ValidateJSON:\n%v\n%s", err, data)
			}
		})
	}
}

// TestValidateLoadedSource checks the source types against their schemas
// through JSON: every fixture, loaded and marshalled, still validates.
func TestValidateLoadedSource(t *testing.T) {
	s, err := Load(os.DirFS(fixtures))
	if err != nil {
		t.Fatal(err)
	}
	check := func(schema string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateJSON(schema, data); err != nil {
			t.Errorf("%s:\n%v\n%s", schema, err, data)
		}
	}
	check(SchemaApp, s.App)
	for _, c := range s.Channels {
		check(SchemaChannel, c)
	}
	for _, r := range s.Releases {
		check(SchemaRelease, r)
	}
	for _, in := range s.Installs {
		check(SchemaInstall, in)
	}
}

// Valid documents that TestValidateJSONRejects breaks, one edit each.
const (
	jobManifest = `{
  "apiVersion": "nuon.dev/v1",
  "kind": "Job",
  "id": "api-update-7",
  "install": "acme",
  "component": "api",
  "operation": "update",
  "plugin": "helm",
  "version": "2.4.0",
  "generation": 7,
  "commit": "0123456789abcdef0123456789abcdef01234567",
  "artifacts": [
    {
      "name": "chart",
      "local": "111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme/shop/charts/api@` + testDigest + `",
      "digest": "` + testDigest + `"
    }
  ],
  "inputs": {"replicas": 2},
  "timeout": "5m",
  "stateDir": "/var/lib/nuon/state/api",
  "resultFile": "/var/lib/nuon/jobs/api-update-7/result.json"
}
`
	componentState = `{
  "apiVersion": "nuon.dev/v1",
  "kind": "ComponentState",
  "name": "api",
  "type": "helm",
  "version": "2.4.0",
  "artifacts": [
    {"name": "chart", "source": "registry.vendor.example/shop/charts/api@` + testDigest + `", "local": "r.example/nuon/shop/charts/api@` + testDigest + `", "digest": "` + testDigest + `"}
  ]
}
`
	installStatus = `{
  "apiVersion": "nuon.dev/v1",
  "kind": "InstallStatus",
  "install": "acme",
  "generation": 7,
  "phase": "Ready",
  "artifacts": "Verified",
  "components": {
    "api": {"phase": "Applied", "version": "2.4.0"}
  }
}
`
	jobResult = `{"apiVersion": "nuon.dev/v1", "kind": "JobResult", "job": "j1", "changed": true}`
)

func TestValidateJSONRejects(t *testing.T) {
	tests := []struct {
		name     string
		schema   string
		doc      string
		old, new string // the edit that breaks doc
		want     []string
	}{
		{name: "valid job manifest", schema: SchemaJob, doc: jobManifest},
		{name: "valid component state", schema: SchemaComponentState, doc: componentState},
		{name: "valid status", schema: SchemaStatus, doc: installStatus},
		{name: "valid job result", schema: SchemaJobResult, doc: jobResult},
		{
			name:   "not JSON",
			schema: SchemaJob,
			doc:    jobManifest, old: `"id": "api-update-7",`, new: `"id": "api-update-7",,`,
			want: []string{`job manifest:4:24: invalid JSON: invalid character ',' looking for beginning of object key string`},
		},
		{
			name:   "empty",
			schema: SchemaJob,
			doc:    jobManifest, old: jobManifest, new: "\n",
			want: []string{`job manifest:1: file is empty`},
		},
		{
			name:   "unknown field",
			schema: SchemaJob,
			doc:    jobManifest, old: `"stateDir"`, new: `"statedir"`,
			want: []string{
				`job manifest:1:1: missing required field "stateDir"`,
				`job manifest:21:3: statedir: unknown field "statedir"; did you mean "stateDir"?`,
			},
		},
		{
			name:   "bad operation",
			schema: SchemaJob,
			doc:    jobManifest, old: `"update"`, new: `"upgrade"`,
			want: []string{`job manifest:7:16: operation: must be one of create, update, delete, drift, health or debug, not "upgrade"`},
		},
		{
			name:   "wrong kind",
			schema: SchemaJob,
			doc:    jobManifest, old: `"Job"`, new: `"InstallStatus"`,
			want: []string{`job manifest:3:11: kind: must be "Job", not "InstallStatus"`},
		},
		{
			name:   "job artifact with a vendor reference",
			schema: SchemaJob,
			doc:    jobManifest, old: `"name": "chart",`, new: `"name": "chart", "source": "registry.vendor.example/shop/charts/api@` + testDigest + `",`,
			want: []string{`job manifest:14:24: artifacts[0].source: unknown field "source"; known fields: digest, local, mediaType, name`},
		},
		{
			name:   "generation that does not fit an int64",
			schema: SchemaJob,
			doc:    jobManifest, old: `"generation": 7`, new: `"generation": 7.0`,
			want: []string{`job manifest:10:17: generation: number 7.0 does not fit a Go int64`},
		},
		{
			name:   "generation zero",
			schema: SchemaJob,
			doc:    jobManifest, old: `"generation": 7`, new: `"generation": 0`,
			want: []string{`job manifest:10:17: generation: must be at least 1, not 0`},
		},
		{
			name:   "bad artifact digest",
			schema: SchemaComponentState,
			doc:    componentState, old: `"digest": "` + testDigest, new: `"digest": "sha256:abc`,
			want: []string{`installs/<id>/components/<name>.json:8:273: artifacts[0].digest: "sha256:abc" is not a digest (sha256: and 64 lower-case hex digits)`},
		},
		{
			name:   "generation not a whole number",
			schema: SchemaStatus,
			doc:    installStatus, old: `"generation": 7`, new: `"generation": 7.5`,
			want: []string{`status.json:5:17: generation: must be a whole number, not a number`},
		},
		{
			name:   "null components",
			schema: SchemaStatus,
			doc:    installStatus, old: `{
    "api": {"phase": "Applied", "version": "2.4.0"}
  }`, new: `null`,
			want: []string{`status.json:8:17: components: has no value; want an object`},
		},
		{
			name:   "unknown artifact verification",
			schema: SchemaStatus,
			doc:    installStatus, old: `"artifacts": "Verified"`, new: `"artifacts": "Skipped"`,
			want: []string{`status.json:7:16: artifacts: must be one of Verified or Unverified, not "Skipped"`},
		},
		{
			name:   "bad component phase",
			schema: SchemaStatus,
			doc:    installStatus, old: `"Applied"`, new: `"Running"`,
			want: []string{`status.json:9:22: components.api.phase: must be one of Applied, Failed, Blocked, Pending, Deleted, Unsupported, AwaitingApproval or Rejected, not "Running"`},
		},
		{
			name:   "component name that is not a label",
			schema: SchemaStatus,
			doc:    installStatus, old: `"api":`, new: `"API":`,
			want: []string{`status.json:9:5: components.API: key "API" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`},
		},
		{
			name:   "string for a boolean",
			schema: SchemaJobResult,
			doc:    jobResult, old: `true`, new: `"yes"`,
			want: []string{`job result:1:76: changed: must be true or false, not a string`},
		},
		{
			name:   "output number too large for Go",
			schema: SchemaJobResult,
			doc:    jobResult, old: `"changed": true`, new: `"changed": true, "outputs": {"a": 1e400}`,
			want: []string{`job result:1:93: outputs: number 1e400 does not fit a Go float64`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.doc
			if tc.old != "" {
				if strings.Count(doc, tc.old) != 1 {
					t.Fatalf("%q does not occur exactly once", tc.old)
				}
				doc = strings.Replace(doc, tc.old, tc.new, 1)
			}
			err := ValidateJSON(tc.schema, []byte(doc))
			var ps Problems
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("ValidateJSON: %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%s", diff, doc)
			}
		})
	}
}

func TestValidateJSONUnknownSchema(t *testing.T) {
	if err := ValidateJSON("nope.schema.json", []byte("{}")); err == nil {
		t.Fatal("ValidateJSON with an unknown schema: no error")
	}
}

// TestSchemaFieldsMatchGo checks that every schema and its Go type agree:
// each property is a field's tag, each field has a property, and every
// field that is always written (no omitempty) is required, in nested
// objects too. A schema may require an omitempty field its writer always
// fills.
func TestSchemaFieldsMatchGo(t *testing.T) {
	set, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for schema, newValue := range goTypes {
		typ := reflect.TypeOf(newValue()).Elem()
		t.Run(schema, func(t *testing.T) {
			compareObject(t, set, typ.Name(), typ, schema, set.raw[schema])
		})
	}
}

// leftOut are the Go fields a schema does not allow: they stay empty (and
// so are not written) in that kind of file.
var leftOut = map[string]bool{
	"Job.Artifacts[].Source": true, // a job deploys from the install registry only
}

// resolve follows the $ref of a raw schema node, relative to file.
func resolve(t *testing.T, set *schemaSet, file string, node any) (string, any) {
	t.Helper()
	for range 10 {
		m, _ := node.(map[string]any)
		ref, ok := m["$ref"].(string)
		if !ok {
			return file, node
		}
		f, ptr, _ := strings.Cut(ref, "#")
		if f != "" {
			file = f
		}
		node = set.raw[file]
		for _, tok := range strings.Split(ptr, "/")[1:] {
			node = node.(map[string]any)[tok]
		}
		if node == nil {
			t.Fatalf("%s: $ref %s resolves to nothing", file, ref)
		}
	}
	t.Fatalf("%s: $ref chain too long", file)
	return "", nil
}

func compareObject(t *testing.T, set *schemaSet, path string, typ reflect.Type, file string, node any) {
	t.Helper()
	file, node = resolve(t, set, file, node)
	m, _ := node.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	var required []string
	reqs, _ := m["required"].([]any)
	for _, r := range reqs {
		required = append(required, r.(string))
	}
	var fields, always []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Errorf("%s.%s has no json name", path, f.Name)
			continue
		}
		if y, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); y != "" && y != name {
			t.Errorf("%s.%s: yaml name %q differs from json name %q", path, f.Name, y, name)
		}
		fields = append(fields, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			always = append(always, name)
		}
		prop, ok := props[name]
		if !ok && !leftOut[path+"."+f.Name] {
			t.Errorf("%s.%s: %s has no property %q", path, f.Name, file, name)
		}
		if !ok {
			continue
		}
		compareValue(t, set, path+"."+f.Name, f.Type, file, prop)
	}
	for name := range props {
		if !slices.Contains(fields, name) {
			t.Errorf("%s: %s has property %q, which is no field's json name", path, file, name)
		}
	}
	for _, name := range always {
		if !slices.Contains(required, name) {
			t.Errorf("%s: %s does not require %q, which is always written (no omitempty)", path, file, name)
		}
	}
	for _, name := range required {
		if !slices.Contains(fields, name) {
			t.Errorf("%s: %s requires %q, which is no field's json name", path, file, name)
		}
	}
}

// compareValue descends into the structs a field holds, directly or in a
// pointer, slice or map.
func compareValue(t *testing.T, set *schemaSet, path string, typ reflect.Type, file string, node any) {
	t.Helper()
	file, node = resolve(t, set, file, node)
	m, _ := node.(map[string]any)
	switch typ.Kind() {
	case reflect.Pointer:
		compareValue(t, set, path, typ.Elem(), file, node)
	case reflect.Struct:
		if typ == reflect.TypeFor[time.Time]() {
			break // a JSON string (RFC 3339), not an object
		}
		compareObject(t, set, path, typ, file, node)
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Struct {
			compareValue(t, set, path+"[]", typ.Elem(), file, m["items"])
		}
	case reflect.Map:
		if typ.Elem().Kind() != reflect.Struct {
			break
		}
		values := m["additionalProperties"]
		if pats, ok := m["patternProperties"].(map[string]any); ok && len(pats) == 1 {
			for _, v := range pats {
				values = v
			}
		}
		compareValue(t, set, path+"[]", typ.Elem(), file, values)
	}
}
