package cli

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestRegistryArgsRoundTrip(t *testing.T) {
	var r RegistryOptions
	f := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	r.Flags(f)
	args := []string{"--registry-ca", "/etc/nuon/ca.pem", "--registry", "127.0.0.1:5000", "--registry-username", "nuon", "--ecr"}
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	if got := r.args(); !slices.Equal(got, args) {
		t.Errorf("job args %v, want %v", got, args)
	}
	var job RegistryOptions
	jf := pflag.NewFlagSet("job", pflag.ContinueOnError)
	job.Flags(jf)
	if err := jf.Parse(r.args()); err != nil || job != r {
		t.Errorf("the job parses %+v (%v), the agent had %+v", job, err, r)
	}
	if _, _, err := (&RegistryOptions{username: "x"}).Client(); err == nil {
		t.Error("--registry-username without --registry was accepted")
	}
}
