package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func runNuon(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errb.String(), err
}

func TestInstallStack(t *testing.T) {
	out, errOut, err := runNuon(t, "install", "stack", "acme", "--tenant-account", "123456789012")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`external id for install acme: (nuon-[a-z2-7]{32})\n`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no generated external id on stderr: %q", errOut)
	}
	var tmpl map[string]any
	if err := json.Unmarshal([]byte(out), &tmpl); err != nil {
		t.Fatalf("stdout is not a JSON template: %v", err)
	}
	if !strings.Contains(out, `"sts:ExternalId": "`+m[1]+`"`) {
		t.Error("the template does not use the printed external id")
	}
	if strings.Contains(out, "external id for") {
		t.Error("the notice went to stdout with the template")
	}

	file := filepath.Join(t.TempDir(), "main.tf")
	_, errOut, err = runNuon(t, "install", "stack", "acme", "--tenant-account", "123456789012", "--external-id", "nuon-given-external-id-00000001", "--format", "terraform", "-o", file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(errOut, "external id for") {
		t.Error("a given external id was announced as generated")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `external_id = "nuon-given-external-id-00000001"`) || !strings.Contains(string(b), `resource "aws_iam_role" "provision"`) {
		t.Errorf("%s is not the Terraform stack with the given external id", file)
	}
}

func TestInstallStackRefuses(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no tenant account", []string{"install", "stack", "acme"}, "tenant-account"},
		{"bad tenant account", []string{"install", "stack", "acme", "--tenant-account", "12"}, "tenant account"},
		{"bad format", []string{"install", "stack", "acme", "--tenant-account", "123456789012", "--format", "yaml"}, "--format"},
		{"bad id", []string{"install", "stack", "Acme!", "--tenant-account", "123456789012"}, "install id"},
		{"guessable external id", []string{"install", "stack", "acme", "--tenant-account", "123456789012", "--external-id", "acme"}, "external id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runNuon(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one about %s", err, tt.want)
			}
			if out != "" {
				t.Errorf("wrote %q to stdout on error", out)
			}
		})
	}
}
