package gitproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCapabilities(t *testing.T) {
	f := newFixture(t, 1)
	c := &Client{URL: f.url}
	ctx := context.Background()
	caps, err := c.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Supports("ls-refs") || !caps.Supports("fetch") || caps["object-format"] != "sha1" {
		t.Errorf("capabilities = %v, want ls-refs, fetch and object-format=sha1", caps)
	}
	if !caps.Supports("fetch", "shallow") || caps.Supports("fetch", "shallow", "no-such-feature") {
		t.Errorf("Supports of fetch features in %q is wrong", caps["fetch"])
	}
	log := f.srv.Log()
	if len(log) != 1 || log[0].Method != "GET" || log[0].Path != "/tenant.git/info/refs" || log[0].Query != "service=git-upload-pack" {
		t.Errorf("requests = %+v, want one GET of info/refs?service=git-upload-pack", log)
	}
	caps["ls-refs"] = "changed"
	f.srv.Reset()
	again, err := c.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.srv.Requests() != 0 {
		t.Errorf("second Capabilities made %d requests, want 0 (cached)", f.srv.Requests())
	}
	if again["ls-refs"] == "changed" {
		t.Error("Capabilities returned the cached map itself")
	}
	// With the capabilities known, commands carry agent and object-format.
	if _, err := c.LsRefs(ctx, "refs/heads/main"); err != nil {
		t.Fatal(err)
	}
}

func TestReadAdvertisement(t *testing.T) {
	v0 := pkt("# service=git-upload-pack\n") + "0000" + pkt("4329ca2df7af90b855363f986aea5db6f0c01a9c HEAD\x00multi_ack ofs-delta\n") + "0000"
	tests := []struct {
		name   string
		in     string
		want   Capabilities
		err    error
		remote string
	}{
		{name: "git http-backend", in: advertisement, want: Capabilities{
			"agent": "git/2.39.5", "ls-refs": "unborn", "fetch": "shallow wait-for-done", "object-format": "sha1",
		}},
		{name: "with a service line", in: pkt("# service=git-upload-pack\n") + "0000" + pkt("version 2\n") + pkt("ls-refs\n") + pkt("fetch\n") + "0000", want: Capabilities{"ls-refs": "", "fetch": ""}},
		{name: "value with =", in: pkt("version 2\n") + pkt("x=a=b\n") + "0000", want: Capabilities{"x": "a=b"}},
		{name: "other service", in: pkt("# service=git-receive-pack\n") + "0000", err: ErrProtocol},
		{name: "version 0", in: v0, err: ErrUnsupported},
		{name: "version 0, no refs", in: pkt("# service=git-upload-pack\n") + "0000" + "0000", err: ErrUnsupported},
		{name: "version 1", in: pkt("version 1\n") + v0[4+len("# service=git-upload-pack\n")+4:], err: ErrUnsupported},
		{name: "garbage", in: pkt("hello\n") + "0000", err: ErrProtocol},
		{name: "flush first", in: "0000", err: ErrProtocol},
		{name: "empty name", in: pkt("version 2\n") + pkt("=x\n") + "0000", err: ErrProtocol},
		{name: "delim", in: pkt("version 2\n") + "0001", err: ErrProtocol},
		{name: "truncated", in: pkt("version 2\n") + pkt("ls-refs\n"), err: io.ErrUnexpectedEOF},
		{name: "remote error", in: pkt("ERR repository disabled\n"), remote: "repository disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAdvertisement(newPktReader(strings.NewReader(tt.in)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
			switch {
			case tt.remote != "":
				if re, ok := errors.AsType[*RemoteError](err); !ok || re.Message != tt.remote {
					t.Errorf("error = %v, want RemoteError %q", err, tt.remote)
				}
			case tt.err == nil && err != nil, !errors.Is(err, tt.err):
				t.Errorf("error = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestCheckCapabilities(t *testing.T) {
	tests := []struct {
		caps Capabilities
		ok   bool
	}{
		{Capabilities{"ls-refs": "", "fetch": ""}, true},
		{Capabilities{"ls-refs": "unborn", "fetch": "shallow", "object-format": "sha1"}, true},
		{Capabilities{"ls-refs": "", "fetch": "", "object-format": "sha256"}, false},
		{Capabilities{"fetch": ""}, false},
		{Capabilities{"ls-refs": ""}, false},
	}
	for _, tt := range tests {
		err := checkCapabilities(tt.caps)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrUnsupported)) {
			t.Errorf("checkCapabilities(%v) = %v", tt.caps, err)
		}
	}
}

func FuzzAdvertisement(f *testing.F) {
	for _, seed := range []string{
		advertisement,
		pkt("# service=git-upload-pack\n") + "0000" + advertisement,
		pkt("# service=git-upload-pack\n") + "0000" + pkt("4329ca2df7af90b855363f986aea5db6f0c01a9c HEAD\x00multi_ack\n") + "0000",
		pkt("version 1\n"), pkt("ERR x"), "0000", "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		caps, err := readAdvertisement(newPktReader(bytes.NewReader(in)))
		if err == nil && caps == nil {
			t.Fatal("no capabilities and no error")
		}
		if err == nil {
			_ = checkCapabilities(caps)
		}
	})
}
