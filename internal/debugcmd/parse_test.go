package debugcmd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

func TestParse(t *testing.T) {
	tests := []struct {
		plugin string
		words  string
		want   Command
	}{
		{schemas.TypeManifests, "get pods", Command{Op: OpGet, Kind: "pods"}},
		{schemas.TypeManifests, "get secret db -n shop", Command{Op: OpGet, Kind: "secret", Name: "db", Namespace: "shop"}},
		{schemas.TypeManifests, "get deployments.apps web --namespace=shop", Command{Op: OpGet, Kind: "deployments.apps", Name: "web", Namespace: "shop"}},
		{schemas.TypeHelm, "describe Deployment web", Command{Op: OpDescribe, Kind: "Deployment", Name: "web"}},
		{schemas.TypeManifests, "events -n shop", Command{Op: OpEvents, Namespace: "shop"}},
		{schemas.TypeManifests, "events", Command{Op: OpEvents}},
		{schemas.TypeHelm, "logs api-7d9f -c api --tail 100 --since 15m", Command{Op: OpLogs, Name: "api-7d9f", Container: "api", Tail: 100, Since: 15 * time.Minute}},
		{schemas.TypeManifests, "logs web-0 --tail=5 -n shop", Command{Op: OpLogs, Name: "web-0", Tail: 5, Namespace: "shop"}},
		{schemas.TypeHelm, "status api", Command{Op: OpStatus, Name: "api"}},
		{schemas.TypeHelm, "history api", Command{Op: OpHistory, Name: "api"}},
		{schemas.TypeTerraform, "state list", Command{Op: OpStateList}},
		{schemas.TypeTerraform, "state show random_password.db", Command{Op: OpStateShow, Address: "random_password.db"}},
		{schemas.TypeTerraform, `state show module.net[0].aws_vpc.this["a"]`, Command{Op: OpStateShow, Address: `module.net[0].aws_vpc.this["a"]`}},
		{schemas.TypeTerraform, "state show data.local_file.x", Command{Op: OpStateShow, Address: "data.local_file.x"}},
	}
	for _, tt := range tests {
		t.Run(tt.plugin+" "+tt.words, func(t *testing.T) {
			got, err := Parse(tt.plugin, strings.Fields(tt.words))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
			again, err := Parse(tt.plugin, got.Words())
			if err != nil {
				t.Fatalf("Parse(Words()) = %v", err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("Parse(Words()) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		plugin string
		words  []string
		reason string
	}{
		{schemas.TypeManifests, nil, "no command"},
		{schemas.TypeManifests, []string{"exec", "web-0", "--", "sh"}, `"exec" is not an allowed manifests command`},
		{schemas.TypeManifests, []string{"delete", "pod", "web-0"}, `"delete" is not an allowed`},
		{schemas.TypeManifests, []string{"sh", "-c", "cat /etc/passwd"}, `"sh" is not an allowed`},
		{schemas.TypeManifests, []string{"status", "api"}, `"status" is not an allowed manifests command`},
		{schemas.TypeTerraform, []string{"get", "pods"}, `"get" is not an allowed terraform command`},
		{schemas.TypeTerraform, []string{"state", "rm", "x.y"}, `"state rm" is not an allowed`},
		{schemas.TypeTerraform, []string{"apply"}, `"apply" is not an allowed`},
		{schemas.TypeTerraform, []string{"state", "show"}, "usage: state show ADDRESS"},
		{schemas.TypeTerraform, []string{"state", "show", "x.y; rm -rf /"}, "is not a resource address"},
		{schemas.TypeTerraform, []string{"state", "list", "-state=/etc/x"}, "flag -state is not allowed"},
		{schemas.TypeImage, []string{"get", "pods"}, `plugin "image" has no debug commands`},
		{schemas.TypeManifests, []string{"get"}, "usage: get KIND [NAME] [-n NS]"},
		{schemas.TypeManifests, []string{"get", "pods", "a", "b"}, "usage: get KIND"},
		{schemas.TypeManifests, []string{"get", "pods", "-n"}, "flag -n needs a value"},
		{schemas.TypeManifests, []string{"get", "pods", "-n", "a", "-n", "b"}, "-n given twice"},
		{schemas.TypeManifests, []string{"get", "pods", "-n", "../kube-system"}, "is not a namespace name"},
		{schemas.TypeManifests, []string{"get", "pods", "-o", "yaml"}, "flag -o is not allowed for get"},
		{schemas.TypeManifests, []string{"get", "pods", "--raw=/api"}, "flag --raw is not allowed"},
		{schemas.TypeManifests, []string{"get", "$(id)"}, `"$(id)" is not a kind`},
		{schemas.TypeManifests, []string{"describe", "pod"}, "usage: describe KIND NAME"},
		{schemas.TypeManifests, []string{"describe", "pod", "Web_0"}, "is not an object name"},
		{schemas.TypeManifests, []string{"events", "x"}, "usage: events [-n NS]"},
		{schemas.TypeManifests, []string{"logs", "web-0", "--tail", "0"}, "--tail \"0\" is not a number"},
		{schemas.TypeManifests, []string{"logs", "web-0", "--tail", "-5"}, "--tail \"-5\" is not a number"},
		{schemas.TypeManifests, []string{"logs", "web-0", "--since", "forever"}, "--since \"forever\" is not a duration"},
		{schemas.TypeManifests, []string{"logs", "web-0", "--since", "800h"}, "is not a duration"},
		{schemas.TypeManifests, []string{"logs", "web-0", "-f"}, "flag -f needs a value"},
		{schemas.TypeManifests, []string{"logs", "web-0", "--follow=true"}, "flag --follow is not allowed"},
		{schemas.TypeManifests, []string{"get", "pods", "-c", "x"}, "flag -c is not allowed for get"},
		{schemas.TypeManifests, []string{"get", strings.Repeat("a", 300)}, "a word longer than 256 bytes"},
		{schemas.TypeManifests, make([]string, 40), "more than 32 words"},
	}
	for _, tt := range tests {
		t.Run(tt.plugin+" "+strings.Join(tt.words, " "), func(t *testing.T) {
			_, err := Parse(tt.plugin, tt.words)
			var r *Refusal
			if !errors.As(err, &r) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Parse error = %v, want a *Refusal wrapping ErrRefused", err)
			}
			if !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("reason %q, want it to hold %q", r.Reason, tt.reason)
			}
		})
	}
}

func TestCheckNamespace(t *testing.T) {
	tests := []struct {
		ns, def string
		allowed []string
		want    string
		refused bool
	}{
		{"", "shop", nil, "shop", false},
		{"shop", "shop", nil, "shop", false},
		{"data", "shop", []string{"data"}, "data", false},
		{"kube-system", "shop", []string{"data"}, "", true},
		{"", "", nil, "", true},
	}
	for _, tt := range tests {
		c := Command{Op: OpEvents, Namespace: tt.ns}
		err := CheckNamespace(&c, tt.def, tt.allowed)
		if tt.refused != errors.Is(err, ErrRefused) {
			t.Errorf("CheckNamespace(%q, %q, %v) = %v, want refused %v", tt.ns, tt.def, tt.allowed, err, tt.refused)
		}
		if !tt.refused && c.Namespace != tt.want {
			t.Errorf("namespace %q, want %q", c.Namespace, tt.want)
		}
	}
}

func TestLimit(t *testing.T) {
	redact := strings.NewReplacer("b", "*").Replace
	tests := []struct {
		name      string
		max       int
		writes    []string
		want      string
		truncated bool
		bytes     int
	}{
		{"under", 10, []string{"abc", "def"}, "a*cdef", false, 6},
		{"exact", 6, []string{"abc", "def"}, "a*cdef", false, 6},
		{"over", 4, []string{"abc", "def", "ghi"}, "a*cd" + TruncatedMarker, true, 9},
		{"split rune", 2, []string{"aé"}, "a" + TruncatedMarker, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimit(tt.max)
			var err error
			for _, w := range tt.writes {
				_, err = l.Write([]byte(w))
			}
			if errors.Is(err, ErrLimit) != tt.truncated {
				t.Errorf("last Write error = %v, want ErrLimit: %v", err, tt.truncated)
			}
			got := l.Answer(Command{Op: OpEvents}, redact)
			want := &schemas.Answer{Command: []string{"events"}, Output: tt.want, Truncated: tt.truncated, Bytes: tt.bytes}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Answer (-want +got):\n%s", diff)
			}
		})
	}
}
