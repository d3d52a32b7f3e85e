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

	"github.com/google/go-cmp/cmp"
)

const (
	testCommit = "0123456789abcdef0123456789abcdef01234567"
	testDigest = "sha256:fb4c1f5ba4e0dfa6111b9f9dadebc15404640ea0cfc9da1dba7eeacad73142d1"
)

// fileTypes pairs every schema with the Go type of its files.
var fileTypes = map[string]reflect.Type{
	SchemaApp:            reflect.TypeFor[App](),
	SchemaChannel:        reflect.TypeFor[Channel](),
	SchemaRelease:        reflect.TypeFor[Release](),
	SchemaInstall:        reflect.TypeFor[Install](),
	SchemaInstallState:   reflect.TypeFor[InstallState](),
	SchemaComponentState: reflect.TypeFor[ComponentState](),
	SchemaJob:            reflect.TypeFor[Job](),
	SchemaJobResult:      reflect.TypeFor[JobResult](),
	SchemaStatus:         reflect.TypeFor[Status](),
}

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
	for name := range fileTypes {
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

// samples are fully populated values of every written file kind.
func samples() map[string]any {
	cloud := Cloud{Provider: "aws", Region: "us-east-1", AccountID: "111111111111"}
	sandbox := Sandbox{Name: "aws-eks", Version: "0.4.0", Inputs: map[string]string{"cluster_version": "1.31"}}
	artifact := Artifact{
		Name:      "chart",
		Source:    "registry.vendor.example/shop/charts/api@" + testDigest,
		Local:     "111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme/shop/charts/api@" + testDigest,
		Digest:    testDigest,
		MediaType: "application/vnd.cncf.helm.config.v1+json",
	}
	inputs := map[string]any{"replicas": 2, "database": map[string]any{"password": "${secrets.db_password}"}}
	terraform := &TerraformSettings{Timeout: "10m"}
	helm := &HelmSettings{Release: "api", Namespace: "shop", Timeout: "5m"}
	manifests := &ManifestSettings{Namespace: "shop", Wait: true, Recreate: true, Timeout: "1m"}
	return map[string]any{
		SchemaInstallState: InstallState{
			APIVersion: APIVersion, Kind: KindInstallState, Install: "acme", App: "shop", Channel: "stable",
			Cloud: cloud, Sandbox: sandbox, Registry: "111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme",
			Components: []string{"network", "database", "api"},
		},
		SchemaComponentState: ComponentState{
			APIVersion: APIVersion, Kind: KindComponentState, Name: "api", Type: TypeHelm, Version: "2.4.0",
			DependsOn: []string{"database"}, Artifacts: []Artifact{artifact}, Inputs: inputs,
			Terraform: terraform, Helm: helm, Manifests: manifests,
		},
		SchemaJob: Job{
			APIVersion: APIVersion, Kind: KindJob, ID: "api-update-7", Install: "acme", Component: "api",
			Operation: OpUpdate, Plugin: TypeHelm, Version: "2.4.0", Generation: 7, Commit: testCommit,
			Artifacts: []Artifact{artifact}, Inputs: inputs, Terraform: terraform, Helm: helm, Manifests: manifests,
			Timeout: "5m", StateDir: "/var/lib/nuon/state/api", ResultFile: "/var/lib/nuon/jobs/api-update-7/result.json",
		},
		SchemaJobResult: JobResult{
			APIVersion: APIVersion, Kind: KindJobResult, Job: "api-update-7",
			Outputs: map[string]any{"endpoint": "db.internal:5432"}, Sensitive: []string{"password"},
			Changed: true, Error: "helm: timed out",
		},
		SchemaStatus: Status{
			APIVersion: APIVersion, Kind: KindStatus, Install: "acme", Desired: testCommit, Applied: testCommit,
			Generation: 7, Phase: InstallRefused,
			Refusal: &Refusal{Commit: testCommit, Reason: "generation 6 is older than the applied 7"},
			Components: map[string]ComponentStatus{"api": {
				Phase: PhaseFailed, Version: "2.4.0", Digests: map[string]string{"chart": testDigest},
				Spec: "sha256:" + strings.Repeat("a", 64), Outputs: map[string]any{"url": "https://acme.shop.example"},
				Sensitive: []string{"token"}, Job: "api-update-7", Error: "helm: timed out",
			}},
		},
	}
}

// assertPopulated fails when a field anywhere in v has its zero value, so
// that the samples exercise every field of the schemas.
func assertPopulated(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			t.Errorf("%s is nil", path)
			return
		}
		assertPopulated(t, path, v.Elem())
	case reflect.Struct:
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

func TestValidateJSONRejects(t *testing.T) {
	valid := func(schema string) map[string]any {
		data, err := json.Marshal(samples()[schema])
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	indent := func(v any) string {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	tests := []struct {
		name   string
		schema string
		data   func() string
		want   []string
	}{
		{
			name:   "not JSON",
			schema: SchemaJob,
			data:   func() string { return "{\n  \"id\": 1,\n}" },
			want:   []string{"job manifest:3:1: invalid JSON: invalid character '}' looking for beginning of object key string"},
		},
		{
			name:   "unknown field",
			schema: SchemaJob,
			data: func() string {
				m := valid(SchemaJob)
				m["statedir"] = "/tmp"
				return indent(m)
			},
			want: []string{`job manifest:39:3: statedir: unknown field "statedir"; did you mean "stateDir"?`},
		},
		{
			name:   "missing field and bad operation",
			schema: SchemaJob,
			data: func() string {
				m := valid(SchemaJob)
				delete(m, "resultFile")
				m["operation"] = "upgrade"
				return indent(m)
			},
			want: []string{
				`job manifest:1:1: missing required field "resultFile"`,
				`job manifest:35:16: operation: must be one of create, update or delete, not "upgrade"`,
			},
		},
		{
			name:   "wrong kind",
			schema: SchemaJob,
			data: func() string {
				m := valid(SchemaJob)
				m["kind"] = KindStatus
				return indent(m)
			},
			want: []string{`job manifest:28:11: kind: must be "Job", not "InstallStatus"`},
		},
		{
			name:   "bad artifact digest",
			schema: SchemaComponentState,
			data: func() string {
				m := valid(SchemaComponentState)
				m["artifacts"].([]any)[0].(map[string]any)["digest"] = "sha256:abc"
				return indent(m)
			},
			want: []string{`installs/<id>/components/<name>.json:5:17: artifacts[0].digest: "sha256:abc" is not a digest (sha256: and 64 lower-case hex digits)`},
		},
		{
			name:   "generation not a whole number",
			schema: SchemaStatus,
			data: func() string {
				m := valid(SchemaStatus)
				m["generation"] = 1.5
				return indent(m)
			},
			want: []string{`status.json:23:17: generation: must be a whole number, not a number`},
		},
		{
			name:   "null components",
			schema: SchemaStatus,
			data: func() string {
				m := valid(SchemaStatus)
				m["components"] = nil
				return indent(m)
			},
			want: []string{`status.json:4:17: components: has no value; want an object`},
		},
		{
			name:   "bad component phase",
			schema: SchemaStatus,
			data: func() string {
				m := valid(SchemaStatus)
				m["components"].(map[string]any)["api"].(map[string]any)["phase"] = "Running"
				return indent(m)
			},
			want: []string{`status.json:14:16: components.api.phase: must be one of Applied, Failed, Blocked, Pending, Deleted or Unsupported, not "Running"`},
		},
		{
			name:   "string for a boolean",
			schema: SchemaJobResult,
			data:   func() string { return `{"apiVersion":"nuon.dev/v1","kind":"JobResult","job":"j1","changed":"yes"}` },
			want:   []string{`job result:1:69: changed: must be true or false, not a string`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateJSON(tc.schema, []byte(tc.data()))
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("ValidateJSON: %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%s", diff, tc.data())
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
// each property is a field's tag, each field has a property, and the
// required properties are exactly the fields that are always written (no
// omitempty), in nested objects too.
func TestSchemaFieldsMatchGo(t *testing.T) {
	set, err := loadSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for schema, typ := range fileTypes {
		t.Run(schema, func(t *testing.T) {
			compareObject(t, set, typ.Name(), typ, schema, set.raw[schema])
		})
	}
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
		if !ok {
			t.Errorf("%s.%s: %s has no property %q", path, f.Name, file, name)
			continue
		}
		compareValue(t, set, path+"."+f.Name, f.Type, file, prop)
	}
	for name := range props {
		if !slices.Contains(fields, name) {
			t.Errorf("%s: %s has property %q, which is no field's json name", path, file, name)
		}
	}
	slices.Sort(required)
	slices.Sort(always)
	if diff := cmp.Diff(always, required); diff != "" {
		t.Errorf("%s: fields without omitempty (-) against required properties in %s (+):\n%s", path, file, diff)
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
		compareObject(t, set, path, typ, file, node)
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.Struct {
			compareValue(t, set, path+"[]", typ.Elem(), file, m["items"])
		}
	case reflect.Map:
		if typ.Elem().Kind() == reflect.Struct {
			compareValue(t, set, path+"[]", typ.Elem(), file, m["additionalProperties"])
		}
	}
}
