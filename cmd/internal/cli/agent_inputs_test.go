package cli

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseInputs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		flags   []string
		want    map[string]string
		wantErr bool
	}{
		{name: "none"},
		{name: "paths", flags: []string{"dir=/srv/acme/sandbox/run", "kube_assets=/cache/kube"},
			want: map[string]string{"dir": "/srv/acme/sandbox/run", "kube_assets": "/cache/kube"}},
		{name: "value with =", flags: []string{"opt=a=b"}, want: map[string]string{"opt": "a=b"}},
		{name: "empty value", flags: []string{"dir="}, want: map[string]string{"dir": ""}},
		{name: "last wins", flags: []string{"dir=/a", "dir=/b"}, want: map[string]string{"dir": "/b"}},
		{name: "no =", flags: []string{"dir"}, wantErr: true},
		{name: "bad name", flags: []string{"1dir=/a"}, wantErr: true},
		{name: "no name", flags: []string{"=/a"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseInputs(tt.flags)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("inputs (-want +got):\n%s", d)
			}
		})
	}
}
