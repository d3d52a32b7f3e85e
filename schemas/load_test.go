package schemas

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"nuon.dev/nuon/internal/gittest"
)

// Tenants to load: the shared sample tenant, and testTenant, a copy of it
// frozen for the tests here so that the lines they expect do not move when
// the shared one changes.
const (
	fixtures   = "../fixtures/tenant"
	testTenant = "testdata/tenant"
)

func TestLoadFixtures(t *testing.T) {
	for _, dir := range []string{fixtures, testTenant} {
		s, err := Load(os.DirFS(dir))
		if err != nil {
			t.Fatalf("load %s:\n%v", dir, err)
		}
		if len(s.Installs) < 3 || len(s.Channels) < 2 || len(s.App.Components) < 4 {
			t.Fatalf("%s too small: %d installs, %d channels, %d components", dir, len(s.Installs), len(s.Channels), len(s.App.Components))
		}
	}
}

// tenant returns the test tenant as an in-memory file system.
func tenant(t testing.TB) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, b := range gittest.Files(t, testTenant) {
		fsys[p] = &fstest.MapFile{Data: b}
	}
	return fsys
}

// An edit changes one file of the tenant.
type edit func(t testing.TB, fsys fstest.MapFS)

// write replaces file's content, creating it if needed.
func write(file, content string) edit {
	return func(_ testing.TB, fsys fstest.MapFS) {
		fsys[file] = &fstest.MapFile{Data: []byte(content)}
	}
}

// remove deletes file.
func remove(file string) edit {
	return func(t testing.TB, fsys fstest.MapFS) {
		t.Helper()
		if _, ok := fsys[file]; !ok {
			t.Fatalf("remove %s: no such file", file)
		}
		delete(fsys, file)
	}
}

// replace replaces the one occurrence of old in file by new.
func replace(file, old, new string) edit {
	return func(t testing.TB, fsys fstest.MapFS) {
		t.Helper()
		f, ok := fsys[file]
		if !ok {
			t.Fatalf("edit %s: no such file", file)
		}
		if n := strings.Count(string(f.Data), old); n != 1 {
			t.Fatalf("edit %s: %q occurs %d times, want once", file, old, n)
		}
		fsys[file] = &fstest.MapFile{Data: []byte(strings.Replace(string(f.Data), old, new, 1))}
	}
}

// appendTo adds text at the end of file.
func appendTo(file, text string) edit {
	return func(t testing.TB, fsys fstest.MapFS) {
		t.Helper()
		f, ok := fsys[file]
		if !ok {
			t.Fatalf("edit %s: no such file", file)
		}
		fsys[file] = &fstest.MapFile{Data: append([]byte(string(f.Data)), text...)}
	}
}

const goodKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOI093FQc+72WNrTUNkTxXuw9DMb7Qmo+M7BQq0kk/Gv nuon-fixture-acme"

// ecdsaKey is an ECDSA public key written after an ssh-ed25519 label.
var ecdsaKey = func() string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	pk, err := ssh.NewPublicKey(&k.PublicKey)
	if err != nil {
		panic(err)
	}
	_, data, _ := strings.Cut(string(ssh.MarshalAuthorizedKey(pk)), " ")
	return "ssh-ed25519 " + strings.TrimSpace(data) + " ecdsa"
}()

// laughs is a YAML file whose aliases expand it a billionfold.
var laughs = func() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return b.String()
}()

// loadCases are one edit (or a few) of the fixtures each, with every
// problem Load must report, as Problem.String gives them.
var loadCases = []struct {
	name  string
	edits []edit
	want  []string
}{
	{
		name:  "yaml syntax error",
		edits: []edit{replace("nuon.yaml", "outputs: [vpc_id]", "outputs: [vpc_id")},
		want:  []string{"nuon.yaml:13: invalid YAML: did not find expected ',' or ']'"},
	},
	{
		name:  "yaml tab indentation",
		edits: []edit{replace("installs/acme.yaml", "  region: us-east-1", "\tregion: us-east-1")},
		want:  []string{"installs/acme.yaml:8: invalid YAML: found a tab character that violates indentation"},
	},
	{
		name:  "unknown field",
		edits: []edit{replace("nuon.yaml", "    outputs: [endpoint]\n", "    outputs: [endpoint]\n    dependson: [network]\n")},
		want:  []string{`nuon.yaml:25:5: components[1].dependson: unknown field "dependson"; did you mean "dependsOn"?`},
	},
	{
		name:  "unknown top-level field",
		edits: []edit{appendTo("installs/acme.yaml", "owner: ops\n")},
		want:  []string{`installs/acme.yaml:15:1: owner: unknown field "owner"; known fields: agentKey, approvals, channel, cloud, deleted, id, inputs, labels, operations, registry, sandbox, versions`},
	},
	{
		name:  "install approval override",
		edits: []edit{appendTo("installs/acme.yaml", "approvals:\n  api:\n    mode: manual\n    require: [delete, replace]\n")},
	},
	{
		name:  "install approval override with an unknown mode and kind",
		edits: []edit{appendTo("installs/acme.yaml", "approvals:\n  api:\n    mode: sometimes\n    autoApprove: [create, destroy]\n")},
		want: []string{
			`installs/acme.yaml:17:11: approvals.api.mode: must be one of auto or manual, not "sometimes"`,
			`installs/acme.yaml:18:27: approvals.api.autoApprove[1]: must be one of noop, create, update, delete or replace, not "destroy"`,
		},
	},
	{
		name:  "install labels",
		edits: []edit{appendTo("installs/acme.yaml", "labels:\n  ring: canary\n  example.com/tier: gold\n  region: \"\"\n")},
	},
	{
		name:  "install label key not a Kubernetes label key",
		edits: []edit{appendTo("installs/acme.yaml", "labels:\n  -ring: canary\n")},
		want:  []string{`installs/acme.yaml:16:3: labels.-ring: key "-ring" is not a Kubernetes label key (an optional DNS prefix and /, then a name of letters, digits, -, _ and ., at most 63 characters, starting and ending with a letter or digit)`},
	},
	{
		name:  "install label value not a Kubernetes label value",
		edits: []edit{appendTo("installs/acme.yaml", "labels:\n  ring: can ary\n")},
		want:  []string{`installs/acme.yaml:16:9: labels.ring: "can ary" is not a Kubernetes label value (letters, digits, -, _ and ., at most 63 characters, starting and ending with a letter or digit, or empty)`},
	},
	{
		name:  "install label key prefix too long",
		edits: []edit{appendTo("installs/acme.yaml", "labels:\n  "+strings.Repeat("a", 254)+"/ring: canary\n")},
		want:  []string{`installs/acme.yaml:16:3: labels.` + strings.Repeat("a", 254) + `/ring: label key "` + strings.Repeat("a", 254) + `/ring": prefix part must be no more than 253 bytes`},
	},
	{
		name:  "missing required field",
		edits: []edit{replace("nuon.yaml", "    type: image\n    repository: registry.vendor.example/shop/api\n", "    type: image\n")},
		want:  []string{`nuon.yaml:26:5: components[2]: missing required field "repository"`},
	},
	{
		name:  "missing required top-level field",
		edits: []edit{replace("installs/globex.yaml", "channel: beta\n", "")},
		want:  []string{`installs/globex.yaml:1:1: missing required field "channel"`},
	},
	{
		name:  "wrong type",
		edits: []edit{replace("nuon.yaml", "      wait: true", `      wait: "true"`)},
		want:  []string{`nuon.yaml:52:13: components[4].manifests.wait: must be true or false, not a string`},
	},
	{
		name:  "unquoted version",
		edits: []edit{replace("channels/stable.yaml", "network: 1.0.0", "network: 1.0")},
		want:  []string{`channels/stable.yaml:3:12: components.network: must be a string, not a number; quote it`},
	},
	{
		name:  "number JSON cannot hold",
		edits: []edit{replace("nuon.yaml", "      replicas: 2", "      replicas: .inf")},
		want:  []string{`nuon.yaml:35:17: components[3].inputs.replicas: .inf is not a finite number, which JSON cannot hold; quote it for the text`},
	},
	{
		name:  "empty list",
		edits: []edit{replace("nuon.yaml", "    outputs: [endpoint]\n", "    outputs:\n")},
		want:  []string{`nuon.yaml:24:13: components[1].outputs: has no value; want a list`},
	},
	{
		name:  "bad enum",
		edits: []edit{replace("nuon.yaml", "    type: image", "    type: docker")},
		want:  []string{`nuon.yaml:27:11: components[2].type: must be one of terraform, helm, manifests, image or plugin, not "docker"`},
	},
	{
		name:  "bad name pattern",
		edits: []edit{replace("nuon.yaml", "  - name: api-image", "  - name: API_Image")},
		want:  []string{`nuon.yaml:26:11: components[2].name: "API_Image" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`},
	},
	{
		name:  "bad key pattern",
		edits: []edit{replace("channels/beta.yaml", "  api: 2.4.0", "  API: 2.4.0")},
		want:  []string{`channels/beta.yaml:5:3: components.API: key "API" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`},
	},
	{
		name:  "bad digest",
		edits: []edit{replace("releases/network.yaml", "digest: sha256:fb4c", "digest: sha256:FB4C")},
		want:  []string{`releases/network.yaml:6:17: versions[0].artifacts.module.digest: "sha256:FB4C1f5ba4e0dfa6111b9f9dadebc15404640ea0cfc9da1dba7eeacad73142d1" is not a digest (sha256: and 64 lower-case hex digits)`},
	},
	{
		name:  "duplicate key",
		edits: []edit{replace("installs/acme.yaml", "channel: stable\n", "channel: stable\nchannel: beta\n")},
		want:  []string{`installs/acme.yaml:2:1: channel: key "channel" appears twice (first at line 1)`},
	},
	{
		name:  "duplicate dependsOn entry",
		edits: []edit{replace("nuon.yaml", "dependsOn: [database, api-image]", "dependsOn: [database, database]")},
		want:  []string{`nuon.yaml:33:27: components[3].dependsOn[1]: "database" is listed twice (first at components[3].dependsOn[0])`},
	},
	{
		name:  "duplicate component",
		edits: []edit{appendTo("nuon.yaml", "\n  - name: api-image\n    type: image\n    repository: registry.vendor.example/shop/api\n")},
		want:  []string{`nuon.yaml:54:11: components[5].name: component "api-image" is declared twice (first at line 26)`},
	},
	{
		name:  "dependsOn names no component",
		edits: []edit{replace("nuon.yaml", "dependsOn: [api]", "dependsOn: [api, cache]")},
		want:  []string{`nuon.yaml:47:22: components[4].dependsOn[1]: "cache" is not a component (components: api, api-image, dashboards, database, network)`},
	},
	{
		name:  "self dependency",
		edits: []edit{replace("nuon.yaml", "dependsOn: [api]", "dependsOn: [dashboards]")},
		want:  []string{`nuon.yaml:47:17: components[4].dependsOn[0]: component "dashboards" depends on itself`},
	},
	{
		name:  "dependency cycle",
		edits: []edit{replace("nuon.yaml", "shop/network\n", "shop/network\n    dependsOn: [dashboards]\n")},
		want:  []string{`nuon.yaml:10:16: components[0].dependsOn: dependency cycle: network → dashboards → api → database → network`},
	},
	{
		name:  "undeclared output",
		edits: []edit{replace("nuon.yaml", "${components.network.outputs.vpc_id}", "${components.network.outputs.vpc}")},
		want:  []string{`nuon.yaml:22:15: components[1].inputs.vpc_id: ${components.network.outputs.vpc}: component "network" declares no output "vpc" (its outputs: vpc_id)`},
	},
	{
		name:  "output of a component not in dependsOn",
		edits: []edit{replace("nuon.yaml", "cidr: ${install.inputs.cidr}", "cidr: ${components.database.outputs.endpoint}")},
		want:  []string{`nuon.yaml:12:13: components[0].inputs.cidr: ${components.database.outputs.endpoint}: component "network" must depend on "database" (add it to dependsOn) to use its outputs`},
	},
	{
		name:  "output of no component",
		edits: []edit{replace("nuon.yaml", "${components.database.outputs.endpoint}", "${components.db.outputs.endpoint}")},
		want:  []string{`nuon.yaml:37:19: components[3].inputs.database.endpoint: ${components.db.outputs.endpoint}: "db" is not a component (components: api, api-image, dashboards, database, network)`},
	},
	{
		name:  "unknown reference",
		edits: []edit{replace("nuon.yaml", "      domain: ${install.inputs.domain}\n    manifests:", "      domain: ${install.domain}\n    manifests:")},
		want:  []string{`nuon.yaml:49:15: components[4].inputs.domain: unknown reference ${install.domain}: want ${install.id}, ${install.inputs.NAME}, ${install.sandbox.outputs.OUTPUT.KEY}, ${components.NAME.outputs.OUTPUT} or ${secrets.NAME}`},
	},
	{
		name:  "unterminated reference",
		edits: []edit{replace("nuon.yaml", "${install.inputs.db_size}", "${install.inputs.db_size")},
		want:  []string{`nuon.yaml:23:13: components[1].inputs.size: unterminated reference "${install.inputs.db_size": no closing }`},
	},
	{
		name:  "channel pin with no release",
		edits: []edit{replace("channels/beta.yaml", "dashboards: 1.2.0", "dashboards: 1.3.0")},
		want:  []string{`channels/beta.yaml:6:15: components.dashboards: dashboards 1.3.0 is not released: releases/dashboards.yaml has no version "1.3.0"`},
	},
	{
		name:  "channel missing a pin",
		edits: []edit{replace("channels/stable.yaml", "  dashboards: 1.1.0\n", "")},
		want:  []string{`channels/stable.yaml:2:1: components: no version pin for component "dashboards"`},
	},
	{
		name:  "channel pins an unknown component",
		edits: []edit{appendTo("channels/stable.yaml", "  worker: 1.0.0\n")},
		want:  []string{`channels/stable.yaml:8:3: components.worker: component "worker" is not in nuon.yaml`},
	},
	{
		name:  "install override of an unknown component",
		edits: []edit{replace("installs/initech.yaml", "  api-image: 2.4.0", "  worker: 2.4.0")},
		want:  []string{`installs/initech.yaml:18:3: versions.worker: component "worker" is not in nuon.yaml`},
	},
	{
		name:  "install override with no release",
		edits: []edit{replace("installs/initech.yaml", "  api: 2.4.0", "  api: 2.5.0")},
		want:  []string{`installs/initech.yaml:17:8: versions.api: api 2.5.0 is not released: releases/api.yaml has no version "2.5.0"`},
	},
	{
		name:  "install id differs from its file name",
		edits: []edit{replace("installs/acme.yaml", "channel: stable\n", "id: acme-corp\nchannel: stable\n")},
		want:  []string{`installs/acme.yaml:1:5: id: is "acme-corp", but the file name makes this install "acme"`},
	},
	{
		name:  "install names a missing channel",
		edits: []edit{replace("installs/globex.yaml", "channel: beta", "channel: canary")},
		want:  []string{`installs/globex.yaml:1:10: channel: channel "canary" does not exist (no channels/canary.yaml)`},
	},
	{
		name:  "install misses an input",
		edits: []edit{replace("installs/acme.yaml", "  db_size: small\n", "")},
		want:  []string{`installs/acme.yaml:2:1: inputs: no input "db_size", which component "database" uses (nuon.yaml:23)`},
	},
	{
		name:  "install misses an input two components use",
		edits: []edit{replace("installs/acme.yaml", "  domain: acme.shop.example\n", "")},
		want: []string{
			`installs/acme.yaml:2:1: inputs: no input "domain", which component "api" uses (nuon.yaml:39)`,
			`installs/acme.yaml:2:1: inputs: no input "domain", which component "dashboards" uses (nuon.yaml:49)`,
		},
	},
	{
		name:  "agent key that does not decode",
		edits: []edit{replace("installs/acme.yaml", goodKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 nuon-fixture-acme")},
		want:  []string{`installs/acme.yaml:14:11: agentKey: the key data is not an SSH public key`},
	},
	{
		name:  "agent key that is not base64",
		edits: []edit{replace("installs/acme.yaml", goodKey, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5A nuon-fixture-acme")},
		want:  []string{`installs/acme.yaml:14:11: agentKey: the key data after ssh-ed25519 is not valid base64`},
	},
	{
		name:  "agent key of the wrong type",
		edits: []edit{replace("installs/acme.yaml", goodKey, "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ nuon-fixture-acme")},
		want:  []string{`installs/acme.yaml:14:11: agentKey: "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ nuon-fixture-acme" is not an OpenSSH ed25519 public key (ssh-ed25519 AAAA… comment)`},
	},
	{
		name:  "agent key with ECDSA data",
		edits: []edit{replace("installs/acme.yaml", goodKey, ecdsaKey)},
		want:  []string{`installs/acme.yaml:14:11: agentKey: the key data is of type ecdsa-sha2-nistp256, not ssh-ed25519`},
	},
	{
		name:  "release file names another component",
		edits: []edit{replace("releases/api.yaml", "component: api\n", "component: api-image\n")},
		want:  []string{`releases/api.yaml:1:12: component: is "api-image", but this file holds the releases of "api" (its name)`},
	},
	{
		name:  "release of no component",
		edits: []edit{write("releases/worker.yaml", "component: worker\nversions: []\n")},
		want:  []string{`releases/worker.yaml:1:12: component: component "worker" is not in nuon.yaml`},
	},
	{
		name:  "version released twice",
		edits: []edit{appendTo("releases/network.yaml", "  - version: 1.0.0\n    artifacts:\n      module:\n        digest: sha256:"+strings.Repeat("0", 64)+"\n")},
		want:  []string{`releases/network.yaml:7:14: versions[1].version: version "1.0.0" is released twice (first at line 3)`},
	},
	{
		name:  "yml file",
		edits: []edit{write("channels/edge.yml", "components: {}\n")},
		want:  []string{`channels/edge.yml: only .yaml files are read; rename it to edge.yaml`},
	},
	{
		name:  "yml install names its channel",
		edits: []edit{remove("channels/beta.yaml"), write("channels/beta.yml", "components: {}\n")},
		want:  []string{`channels/beta.yml: only .yaml files are read; rename it to beta.yaml`},
	},
	{
		name:  "upper-case extension",
		edits: []edit{write("installs/a.YAML", "channel: stable\n")},
		want:  []string{`installs/a.YAML: only lower-case .yaml files are read; rename it to a.yaml`},
	},
	{
		name:  "mixed-case yml",
		edits: []edit{write("installs/a.Yml", "channel: stable\n")},
		want:  []string{`installs/a.Yml: only lower-case .yaml files are read; rename it to a.yaml`},
	},
	{
		name:  "yml channel beside the yaml one",
		edits: []edit{write("channels/stable.yml", "components: {}\n")},
		want:  []string{`channels/stable.yml: only .yaml files are read; rename it to stable.yaml`},
	},
	{
		name:  "file that is not a source",
		edits: []edit{write("installs/acme.txt", "channel: stable\n")},
		want:  []string{`installs/acme.txt: is not a source file: installs/ holds only <name>.yaml files, README.md and .gitkeep`},
	},
	{
		name:  "hidden file",
		edits: []edit{write("releases/.api.yaml.swp", "x")},
		want:  []string{`releases/.api.yaml.swp: is not a source file: releases/ holds only <name>.yaml files, README.md and .gitkeep`},
	},
	{
		name:  "readme and gitkeep are allowed",
		edits: []edit{write("installs/README.md", "# installs\n"), write("channels/.gitkeep", ""), write("README.md", "x"), write("modules/x/main.tf", "")},
	},
	{
		name:  "readme in another case",
		edits: []edit{write("installs/readme.md", "# installs\n")},
		want:  []string{`installs/readme.md: is not a source file: installs/ holds only <name>.yaml files, README.md and .gitkeep`},
	},
	{
		name:  "folder in a source folder",
		edits: []edit{write("installs/acme/extra.yaml", "channel: stable\n")},
		want:  []string{`installs/acme: is a folder; installs/ holds only <name>.yaml files, README.md and .gitkeep`},
	},
	{
		name:  "folder named as a source file",
		edits: []edit{remove("installs/initech.yaml"), write("installs/initech.yaml/x", "channel: stable\n")},
		want:  []string{`installs/initech.yaml: is a folder; a source file must be a regular file`},
	},
	{
		name:  "app file is a folder",
		edits: []edit{remove("nuon.yaml"), write("nuon.yaml/x", "name: shop\n")},
		want:  []string{`nuon.yaml: is a folder; nuon.yaml must be a regular file`},
	},
	{
		name:  "source folder is a file",
		edits: []edit{remove("channels/beta.yaml"), remove("channels/stable.yaml"), write("channels", "beta: {}\n")},
		want: []string{
			`channels: is a file; channels must be a folder of <name>.yaml files`,
			`installs/acme.yaml:1:10: channel: channel "stable" does not exist (no channels/stable.yaml)`,
			`installs/globex.yaml:1:10: channel: channel "beta" does not exist (no channels/beta.yaml)`,
			`installs/initech.yaml:1:10: channel: channel "stable" does not exist (no channels/stable.yaml)`,
		},
	},
	{
		name:  "source folder in another case",
		edits: []edit{write("Installs/hooli.yaml", "channel: stable\n")},
		want:  []string{`Installs: is not read; the folder is installs (lower case)`},
	},
	{
		name:  "app file in another case beside it",
		edits: []edit{write("NUON.yaml", "name: shop\n")},
		want:  []string{`NUON.yaml: is not read; the app is declared in nuon.yaml (lower case, .yaml)`},
	},
	{
		name:  "app file in another case alone",
		edits: []edit{remove("nuon.yaml"), write("Nuon.yaml", "name: shop\n")},
		want:  []string{`nuon.yaml: missing; rename Nuon.yaml to nuon.yaml`},
	},
	{
		name:  "name with a control character",
		edits: []edit{write("installs/a\x1b[2Jb.yaml", "channel: stable\n")},
		want:  []string{`installs/"a\x1b[2Jb.yaml": a name with a control or invisible character in it`},
	},
	{
		name:  "name that is not UTF-8",
		edits: []edit{write("installs/\xff.yaml", "channel: stable\n")},
		want:  []string{`installs/"\xff.yaml": a name that is not UTF-8`},
	},
	{
		name:  "file over the size cap",
		edits: []edit{write("installs/big.yaml", "channel: stable\n#"+strings.Repeat("x", DefaultMaxFileSize))},
		want:  []string{`installs/big.yaml: is 1.0 MiB (1048593 bytes), more than the 1 MiB a source file may be`},
	},
	{
		name:  "app file over the size cap",
		edits: []edit{appendTo("nuon.yaml", "#"+strings.Repeat("x", 3<<20))},
		want:  []string{`nuon.yaml: is 3.0 MiB (3147156 bytes), more than the 1 MiB a source file may be`},
	},
	{
		name:  "file name that is not a label",
		edits: []edit{write("installs/Acme_2.yaml", "channel: stable\n")},
		want:  []string{`installs/Acme_2.yaml: file name "Acme_2" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`},
	},
	{
		name:  "empty file",
		edits: []edit{write("channels/edge.yaml", "")},
		want:  []string{`channels/edge.yaml:1: file is empty`},
	},
	{
		name:  "file with only comments",
		edits: []edit{write("channels/edge.yaml", "# soon\n")},
		want:  []string{`channels/edge.yaml:1: file is empty`},
	},
	{
		name:  "file with only a document marker",
		edits: []edit{write("channels/edge.yaml", "---\n")},
		want:  []string{`channels/edge.yaml:1: file is empty`},
	},
	{
		name:  "two documents",
		edits: []edit{appendTo("installs/acme.yaml", "---\nchannel: beta\n")},
		want:  []string{`installs/acme.yaml:15:1: a second YAML document starts here; a file holds exactly one`},
	},
	{
		name:  "syntax error in a second document",
		edits: []edit{appendTo("installs/acme.yaml", "---\nchannel: [beta\n")},
		want:  []string{`installs/acme.yaml:16: invalid YAML: did not find expected ',' or ']'`},
	},
	{
		name:  "not a mapping",
		edits: []edit{write("channels/beta.yaml", "- network\n")},
		want:  []string{`channels/beta.yaml:1:1: must be a mapping, not a list`},
	},
	{
		name:  "missing app file",
		edits: []edit{remove("nuon.yaml")},
		want:  []string{`nuon.yaml: missing: the app and its components are declared in nuon.yaml at the root`},
	},
	{
		name:  "app file named nuon.yml",
		edits: []edit{remove("nuon.yaml"), write("nuon.yml", "name: shop\n")},
		want:  []string{`nuon.yaml: missing; rename nuon.yml to nuon.yaml`},
	},
	{
		name:  "values nested too deeply",
		edits: []edit{replace("nuon.yaml", "      replicas: 2", "      replicas: "+strings.Repeat("[", 70)+strings.Repeat("]", 70))},
		want:  []string{`nuon.yaml:35:78: components[3].inputs.replicas` + strings.Repeat("[0]", 61) + `: values nest more than 64 levels deep`},
	},
	{
		name:  "aliases that expand too far",
		edits: []edit{write("channels/edge.yaml", laughs)},
		want:  []string{`channels/edge.yaml:1: aliases expand the file to more than 6110 values`},
	},
	{
		name:  "recursive alias",
		edits: []edit{replace("nuon.yaml", "outputs: [vpc_id]", "outputs: &o [*o]")},
		want:  []string{`nuon.yaml:13:18: components[0].outputs[0]: alias *o refers to a value that contains it`},
	},
	{
		name:  "merge key",
		edits: []edit{replace("nuon.yaml", "  - name: api-image\n", "  - <<: {x: 1}\n    name: api-image\n")},
		want:  []string{`nuon.yaml:26:5: components[2]: merge keys (<<) are not supported; write the fields out`},
	},
	{
		name:  "alias is expanded",
		edits: []edit{replace("nuon.yaml", "      namespace: shop\n      timeout: 5m", "      namespace: &ns shop\n      timeout: 5m"), replace("nuon.yaml", "      namespace: shop\n      wait: true", "      namespace: *ns\n      wait: true")},
	},
	{
		name:  "alias to a bad value",
		edits: []edit{replace("nuon.yaml", "      namespace: shop\n      timeout: 5m", "      namespace: &ns Shop\n      timeout: 5m"), replace("nuon.yaml", "      namespace: shop\n      wait: true", "      namespace: *ns\n      wait: true")},
		want: []string{
			`nuon.yaml:41:18: components[3].helm.namespace: "Shop" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`,
			`nuon.yaml:51:18: components[4].manifests.namespace: "Shop" is not a lower-case DNS label (a-z, 0-9 and -, at most 63 characters, not starting or ending with -)`,
		},
	},
	{
		name:  "alias used before its anchor",
		edits: []edit{replace("nuon.yaml", "      namespace: shop\n      timeout: 5m", "      namespace: *ns\n      timeout: 5m")},
		want:  []string{`nuon.yaml:41:18: invalid YAML: unknown anchor 'ns' referenced`},
	},
	{
		name:  "a broken release file is not reported again by the pins",
		edits: []edit{replace("releases/api.yaml", "component: api\n", "component: api\nowner: ci\n")},
		want:  []string{`releases/api.yaml:2:1: owner: unknown field "owner"; known fields: component, versions`},
	},
	{
		name: "a broken app file still lets the other files be checked",
		edits: []edit{
			replace("nuon.yaml", "    type: image", "    type: docker"),
			replace("installs/globex.yaml", "channel: beta", "channel: canary"),
			replace("channels/beta.yaml", "dashboards: 1.2.0", "dashboards: 1.3.0"),
		},
		want: []string{
			`installs/globex.yaml:1:10: channel: channel "canary" does not exist (no channels/canary.yaml)`,
			`nuon.yaml:27:11: components[2].type: must be one of terraform, helm, manifests, image or plugin, not "docker"`,
		},
	},
	{
		name:  "pin of a component with no release file",
		edits: []edit{remove("releases/dashboards.yaml")},
		want: []string{
			`channels/beta.yaml:6:15: components.dashboards: dashboards 1.2.0 is not released: there is no releases/dashboards.yaml`,
			`channels/stable.yaml:7:15: components.dashboards: dashboards 1.1.0 is not released: there is no releases/dashboards.yaml`,
		},
	},
	{
		name: "problems in several files",
		edits: []edit{
			replace("installs/globex.yaml", "channel: beta", "channel: canary"),
			replace("channels/stable.yaml", "  dashboards: 1.1.0\n", ""),
			replace("installs/acme.yaml", "  provider: aws", "  provider: gcp"),
			replace("releases/api.yaml", "component: api\n", "component: api-image\n"),
			write("channels/edge.yml", "components: {}\n"),
		},
		want: []string{
			`channels/edge.yml: only .yaml files are read; rename it to edge.yaml`,
			`channels/stable.yaml:2:1: components: no version pin for component "dashboards"`,
			`installs/acme.yaml:7:13: cloud.provider: must be one of aws or local, not "gcp"`,
			`installs/globex.yaml:1:10: channel: channel "canary" does not exist (no channels/canary.yaml)`,
			`releases/api.yaml:1:12: component: is "api-image", but this file holds the releases of "api" (its name)`,
		},
	},
}

func TestLoadProblems(t *testing.T) {
	for _, tc := range loadCases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := tenant(t)
			for _, e := range tc.edits {
				e(t, fsys)
			}
			_, err := Load(fsys)
			var ps Problems
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("Load: %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadKeepsNoInstallDocument checks that a loaded source holds no
// install file's parsed document: with 100,000 installs they are most of a
// render's memory, and only an install's own checks need its document.
func TestLoadKeepsNoInstallDocument(t *testing.T) {
	s, err := Load(tenant(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Installs) == 0 {
		t.Fatal("the fixture tenant has no installs")
	}
	for file := range s.docs {
		if strings.HasPrefix(file, InstallsDir+"/") {
			t.Errorf("the source keeps the document of %s", file)
		}
	}
}

// TestLoadManyInstalls loads many install files, read side by side, some
// broken in their own file and some wrong against the rest: every good
// one is loaded, every broken one is broken, and the problems come in file
// order, as one worker reading them in turn reports them. Open and
// EachInstall find the same problems and hand over only the sound
// installs.
func TestLoadManyInstalls(t *testing.T) {
	fsys := tenant(t)
	acme := string(fsys["installs/acme.yaml"].Data)
	const n = 2348
	var wantFiles []string
	for i := range n {
		file := fmt.Sprintf("installs/x%05d.yaml", i)
		content := acme
		switch {
		case i%97 == 0:
			content = "channel: [\n" // not YAML
		case i%89 == 0:
			content = strings.Replace(acme, "channel: stable", "channel: nightly", 1)
		}
		if content != acme {
			wantFiles = append(wantFiles, file)
		}
		fsys[file] = &fstest.MapFile{Data: []byte(content)}
	}
	s, err := Load(fsys)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("load: %v, want problems", err)
	}
	var files []string
	for _, p := range ps {
		if len(files) == 0 || files[len(files)-1] != p.File {
			files = append(files, p.File)
		}
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("files with problems, in order (-want +got):\n%s", diff)
	}
	for i := range n {
		id := fmt.Sprintf("x%05d", i)
		_, loaded := s.Installs[id]
		broken := s.broken["installs/"+id+".yaml"]
		if want := i%97 != 0; loaded != want || broken == want {
			t.Fatalf("install %s: loaded %v, broken %v; want loaded %v", id, loaded, broken, want)
		}
	}

	opened, err := Open(fsys)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var mu sync.Mutex
	handed := map[string]int{}
	err = opened.EachInstall(context.Background(), func(id string, in Install) {
		mu.Lock()
		defer mu.Unlock()
		handed[id]++
		if diff := cmp.Diff(s.Installs[id], in); diff != "" {
			t.Errorf("install %s handed over differs from Load's (-load +each):\n%s", id, diff)
		}
	})
	var eps Problems
	if !errors.As(err, &eps) {
		t.Fatalf("each install: %v, want problems", err)
	}
	if diff := cmp.Diff(ps, eps); diff != "" {
		t.Errorf("EachInstall's problems differ from Load's (-load +each):\n%s", diff)
	}
	if len(opened.Installs) != 0 {
		t.Errorf("EachInstall filed %d installs in Installs", len(opened.Installs))
	}
	for _, id := range opened.ListedInstalls() {
		i, _ := strconv.Atoi(strings.TrimPrefix(id, "x"))
		want := 1
		if strings.HasPrefix(id, "x") && (i%97 == 0 || i%89 == 0) {
			want = 0
		}
		if handed[id] != want {
			t.Errorf("install %s handed over %d times, want %d", id, handed[id], want)
		}
		if broken := opened.broken["installs/"+id+".yaml"]; broken != (strings.HasPrefix(id, "x") && i%97 == 0) {
			t.Errorf("install %s: broken %v after EachInstall", id, broken)
		}
	}
	if got, want := len(opened.ListedInstalls()), len(s.Installs)+n/97+1; got != want {
		t.Errorf("listed %d installs, want %d", got, want)
	}
}
