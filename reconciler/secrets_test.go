package reconciler

import (
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestSecretEnv(t *testing.T) {
	for name, want := range map[string]string{
		"token":       "NUON_SECRET_TOKEN",
		"db-password": "NUON_SECRET_DB_PASSWORD",
		"API_key":     "NUON_SECRET_API_KEY",
	} {
		if got := SecretEnv(name); got != want {
			t.Errorf("SecretEnv(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestResolveSecrets(t *testing.T) {
	env := map[string]string{
		"NUON_SECRET_DB_PASS": "p@ssw0rd",
		"NUON_SECRET_TOKEN":   "t0ken-value",
		"NUON_SECRET_SHORT":   "abc",
		"NUON_SECRET_SPACES":  "a b c d e f g",
		"NUON_SECRET_BINARY":  "\xff\xfe-not-text",
		"NUON_SECRET_EMPTY":   "",
		"NUON_SECRET_REF":     "${secrets.token}",
	}
	tests := []struct {
		name        string
		inputs      map[string]any
		want        map[string]any
		wantSecrets []string
		wantErr     string
		wantIs      error // default ErrSecretMissing
	}{
		{name: "nil", want: map[string]any{}},
		{
			name:   "everywhere in the tree",
			inputs: map[string]any{"url": "postgres://u:${secrets.db-pass}@db", "list": []any{"${secrets.token}", 3.5}, "m": map[string]any{"k": []any{map[string]any{"v": "x${secrets.token}"}}}},
			want:   map[string]any{"url": "postgres://u:p@ssw0rd@db", "list": []any{"t0ken-value", 3.5}, "m": map[string]any{"k": []any{map[string]any{"v": "xt0ken-value"}}}},
			// Sorted, each once.
			wantSecrets: []string{"p@ssw0rd", "t0ken-value"},
		},
		{
			name:   "other references and scalars kept",
			inputs: map[string]any{"a": "${inputs.x} ${HOME} ${secrets.}", "n": int64(7), "b": true, "z": nil},
			want:   map[string]any{"a": "${inputs.x} ${HOME} ${secrets.}", "n": int64(7), "b": true, "z": nil},
		},
		{
			name:   "empty value resolved, not redacted",
			inputs: map[string]any{"a": "[${secrets.empty}]"},
			want:   map[string]any{"a": "[]"},
		},
		{
			name:        "value never read as a reference",
			inputs:      map[string]any{"a": "${secrets.ref}"},
			want:        map[string]any{"a": "${secrets.token}"},
			wantSecrets: []string{"${secrets.token}"},
		},
		{
			// Too short to redact safely: refused, named, never shown.
			name:   "unusable, in path order",
			inputs: map[string]any{"b": "${secrets.short}", "a": "${secrets.spaces} ${secrets.binary}"},
			wantIs: ErrSecretUnusable,
			wantErr: "input a: secret unusable: secret spaces (NUON_SECRET_SPACES): too short to redact: 7 bytes besides whitespace, the minimum is 8\n" +
				"input a: secret unusable: secret binary (NUON_SECRET_BINARY): not UTF-8 text\n" +
				"input b: secret unusable: secret short (NUON_SECRET_SHORT): too short to redact: 3 bytes besides whitespace, the minimum is 8",
		},
		{
			name: "missing, in path order",
			inputs: map[string]any{
				"d": "${secrets.token}",
				"b": map[string]any{"c": []any{"x-${secrets.two}"}},
				"a": "${secrets.one} ${secrets.three}",
			},
			wantErr: "input a: secret missing: one (NUON_SECRET_ONE is not set)\n" +
				"input a: secret missing: three (NUON_SECRET_THREE is not set)\n" +
				"input b.c[0]: secret missing: two (NUON_SECRET_TWO is not set)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, secrets, err := ResolveSecrets(tt.inputs, lookupIn(env))
			if tt.wantErr != "" {
				if tt.wantIs == nil {
					tt.wantIs = ErrSecretMissing
				}
				if !errors.Is(err, tt.wantIs) {
					t.Fatalf("ResolveSecrets error = %v, want %v", err, tt.wantIs)
				}
				if diff := cmp.Diff(tt.wantErr, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ResolveSecrets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSecrets, secrets); diff != "" {
				t.Errorf("secrets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveSecretsCopies(t *testing.T) {
	inputs := map[string]any{"m": map[string]any{"k": "${secrets.token}"}, "l": []any{"${secrets.token}"}}
	if _, _, err := ResolveSecrets(inputs, lookupIn(map[string]string{"NUON_SECRET_TOKEN": "t0ken-value"})); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"m": map[string]any{"k": "${secrets.token}"}, "l": []any{"${secrets.token}"}}
	if diff := cmp.Diff(want, inputs); diff != "" {
		t.Errorf("inputs changed (-want +got):\n%s", diff)
	}
}

// FuzzResolveSecrets checks that each reference is looked up once, in a
// single pass (a secret's value, here itself a reference, is never read
// again), and that a string without references comes back unchanged.
func FuzzResolveSecrets(f *testing.F) {
	for _, s := range []string{
		"",
		"plain",
		"${secrets.a}",
		"x${secrets.a}y${secrets.b-c}z",
		"${secrets.${secrets.a}}",
		"$${secrets.a}",
		"${secrets.}",
		"${secrets.a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip("inputs are JSON text")
		}
		var lookups int
		again := func(string) (string, bool) {
			lookups++
			return "${secrets.again}", true
		}
		got, _, err := ResolveSecrets(map[string]any{"v": s}, again)
		if err != nil {
			t.Fatal(err)
		}
		if want := len(secretRef.FindAllString(s, -1)); lookups != want {
			t.Errorf("resolve(%q) looked up %d secrets, want %d", s, lookups, want)
		}
		if lookups == 0 && got["v"] != s {
			t.Errorf("resolve(%q) = %q, want it unchanged", s, got["v"])
		}
	})
}
