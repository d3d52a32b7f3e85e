package gitproto

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"
)

func TestParseSSH(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want SSHEndpoint
		str  string
		err  string
	}{
		{in: "ssh://git@example.com/vendor/tenant.git", ok: true, want: SSHEndpoint{User: "git", Host: "example.com", Path: "/vendor/tenant.git"}, str: "ssh://example.com/vendor/tenant.git"},
		{in: "ssh://git@127.0.0.1:2222/srv/t.git", ok: true, want: SSHEndpoint{User: "git", Host: "127.0.0.1", Port: 2222, Path: "/srv/t.git"}, str: "ssh://127.0.0.1:2222/srv/t.git"},
		{in: "ssh://[::1]:22/~/t.git", ok: true, want: SSHEndpoint{Host: "::1", Port: 22, Path: "~/t.git"}, str: "ssh://[::1]:22/~/t.git"},
		{in: "git+ssh://example.com/t.git", ok: true, want: SSHEndpoint{Host: "example.com", Path: "/t.git"}, str: "ssh://example.com/t.git"},
		{in: "git@example.com:vendor/tenant.git", ok: true, want: SSHEndpoint{User: "git", Host: "example.com", Path: "vendor/tenant.git", scp: true}, str: "example.com:vendor/tenant.git"},
		{in: "example.com:/abs/t.git", ok: true, want: SSHEndpoint{Host: "example.com", Path: "/abs/t.git", scp: true}, str: "example.com:/abs/t.git"},
		{in: "git@[::1]:t.git", ok: true, want: SSHEndpoint{User: "git", Host: "::1", Path: "t.git", scp: true}, str: "[::1]:t.git"},
		{in: "ssh://git:secret@example.com/t.git", ok: true, err: "password"},
		{in: "ssh://example.com", ok: true, err: "no repository path"},
		{in: "ssh://example.com:99999/t.git", ok: true, err: "bad port"},
		{in: "git@example.com:", ok: true, err: "no repository path"},
		{in: "@:x", ok: true, err: "no host"},
		{in: "git@[::1:t.git", ok: true, err: "unclosed"},
		{in: "/srv/tenant.git"},
		{in: "./a:b"},
		{in: "https://example.com/t.git"},
		{in: "file:///srv/t.git"},
		{in: "tenant.git"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok, err := ParseSSH(tt.in)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(SSHEndpoint{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.String() != tt.str {
				t.Errorf("String() = %q, want %q", got.String(), tt.str)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://agent:s3cret@git.example.com/t.git": "https://git.example.com/t.git",
		"https://tok3n@git.example.com/t.git":        "https://git.example.com/t.git",
		"https://git.example.com/t.git":              "https://git.example.com/t.git",
		"ssh://git@example.com:2222/t.git":           "ssh://example.com:2222/t.git",
		"git@example.com:t.git":                      "example.com:t.git",
		"/srv/t.git":                                 "/srv/t.git",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	// An unreachable URL with a password: the error leaves it out.
	c := &Client{URL: "http://agent:s3cret@127.0.0.1:1/t.git"}
	_, err := c.LsRefs(t.Context(), "refs/")
	if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "agent@") {
		t.Errorf("LsRefs error = %v, want one without the user information", err)
	}
}

func FuzzParseSSH(f *testing.F) {
	for _, s := range []string{"ssh://git@example.com:22/t.git", "git@example.com:t.git", "git@[::1]:t", "/srv/t.git", "ssh://[::1", "a:b", "ssh://u:p@h/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		e, ok, err := ParseSSH(in)
		if !ok || err != nil {
			return
		}
		if e.Host == "" || e.Path == "" {
			t.Fatalf("ParseSSH(%q) = %+v without a host or path", in, e)
		}
		if strings.ContainsAny(e.Path, "\x00\n") {
			t.Fatalf("ParseSSH(%q): path %q has a NUL or newline", in, e.Path)
		}
		// The quoted path is one shell word that unquotes to the path.
		q := shellQuote(e.Path)
		if got, ok := shellUnquote(q); !ok || got != e.Path {
			t.Fatalf("shellQuote(%q) = %q, which a shell reads as %q (one word: %v)", e.Path, q, got, ok)
		}
	})
}

// shellUnquote reads s as a POSIX shell reads one word made of single
// quoted strings and backslash escapes; ok is false if it is not one word.
func shellUnquote(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case strings.IndexByte(" \t\n;&|<>()$`\"*?[#~=%!{}", c) >= 0:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func TestReadReportStatus(t *testing.T) {
	ref := plumbing.ReferenceName("refs/heads/nuon/status/acme")
	tests := []struct {
		name  string
		in    string
		want  *PushError
		err   error
		stale bool
	}{
		{name: "ok", in: pkt("unpack ok\n") + pkt("ok "+ref.String()+"\n") + "0000"},
		{name: "hook", in: pkt("unpack ok\n") + pkt("ng "+ref.String()+" pre-receive hook declined\n") + "0000",
			want: &PushError{Refs: []RefStatus{{ref, "pre-receive hook declined"}}}},
		{name: "non-fast-forward", in: pkt("unpack ok\n") + pkt("ng "+ref.String()+" non-fast-forward\n") + "0000",
			want: &PushError{Refs: []RefStatus{{ref, "non-fast-forward"}}}, stale: true},
		{name: "unpack failed", in: pkt("unpack index-pack abnormal exit\n") + pkt("ng "+ref.String()+" unpacker error\n") + "0000",
			want: &PushError{Unpack: "index-pack abnormal exit", Refs: []RefStatus{{ref, "unpacker error"}}}},
		{name: "no unpack line", in: pkt("ok "+ref.String()+"\n") + "0000", err: ErrProtocol},
		{name: "bad verb", in: pkt("unpack ok\n") + pkt("maybe "+ref.String()+"\n") + "0000", err: ErrProtocol},
		{name: "cut short", in: pkt("unpack ok\n"), err: ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readReportStatus(newPktReader(strings.NewReader(tt.in)), nil)
			if tt.err != nil {
				if err == nil {
					t.Fatalf("err = nil, want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got != nil && errors.Is(got, ErrStale) != tt.stale {
				t.Errorf("errors.Is(ErrStale) = %v, want %v", !tt.stale, tt.stale)
			}
		})
	}
}

func FuzzReportStatus(f *testing.F) {
	f.Add(pkt("unpack ok\n") + pkt("ok refs/heads/a\n") + "0000")
	f.Add(pkt("unpack ok\n") + pkt("ng refs/heads/a non-fast-forward\n") + "0000")
	f.Add(pkt("unpack bad\n") + "0000")
	f.Add("\x0001" + pkt("\x01"+pkt("unpack ok\n")+"0000") + pkt("\x02remote: hi\n") + "0000")
	f.Fuzz(func(t *testing.T, in string) {
		perr, err := readReportStatus(newPktReader(strings.NewReader(in)), nil)
		if err == nil && perr != nil && perr.Unpack == "" && len(perr.Refs) == 0 {
			t.Fatalf("empty PushError for %q", in)
		}
		_, _ = readPushResponse(newPktReader(strings.NewReader(in)))
	})
}

func FuzzRefAdvertisement(f *testing.F) {
	oid := strings.Repeat("a", 40)
	f.Add(pkt(oid+" refs/heads/main\x00report-status side-band-64k\n") + pkt(oid+" refs/tags/v1^{}\n") + "0000")
	f.Add(pkt(strings.Repeat("0", 40)+" capabilities^{}\x00report-status\n") + "0000")
	f.Add(pkt("# service=git-upload-pack\n") + "0000" + pkt("version 1\n") + pkt(oid+" HEAD\x00\n") + "0000")
	f.Add(pkt("version 2\n") + pkt("ls-refs\n") + "0000")
	f.Fuzz(func(t *testing.T, in string) {
		caps, adv, err := readOpening(newPktReader(strings.NewReader(in)), "git-upload-pack")
		if err != nil {
			return
		}
		if (caps == nil) == (adv == nil) {
			t.Fatalf("readOpening(%q) = %v, %v: want capabilities or refs", in, caps, adv)
		}
		if adv != nil {
			for name, h := range adv.refs {
				if h.IsZero() || name == "" || strings.HasSuffix(name.String(), "^{}") {
					t.Fatalf("bad ref %q %s from %q", name, h, in)
				}
			}
		}
	})
}
