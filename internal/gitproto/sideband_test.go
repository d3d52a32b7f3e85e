package gitproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSideband(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string
		err    error  // errors.Is target; nil for a clean end
		remote string // the RemoteError's message
	}{
		{name: "data", in: pkt("\x01PACK") + pkt("\x01data") + "0000", want: "PACKdata"},
		{name: "progress dropped", in: pkt("\x02Counting objects\r") + pkt("\x01PACK") + pkt("\x02done\n") + "0000", want: "PACK"},
		{name: "empty data packets", in: pkt("\x01") + pkt("\x01x") + "0000", want: "x"},
		{name: "remote error", in: pkt("\x01PA") + pkt("\x03upload-pack: out of memory\n") + pkt("\x01CK") + "0000", want: "PA", remote: "upload-pack: out of memory"},
		{name: "no band", in: "0004" + "0000", err: ErrProtocol},
		{name: "unknown band", in: pkt("\x04x") + "0000", err: ErrProtocol},
		{name: "delim", in: pkt("\x01PACK") + "0001", want: "PACK", err: ErrProtocol},
		{name: "truncated", in: pkt("\x01PACK"), want: "PACK", err: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := newSidebandReader(newPktReader(strings.NewReader(tt.in)))
			got, err := io.ReadAll(sb)
			if string(got) != tt.want {
				t.Errorf("data = %q, want %q", got, tt.want)
			}
			if sb.data != int64(len(got)) {
				t.Errorf("counted %d bytes, read %d", sb.data, len(got))
			}
			if tt.remote != "" {
				if re, ok := errors.AsType[*RemoteError](err); !ok || re.Message != tt.remote {
					t.Errorf("error = %v, want RemoteError %q", err, tt.remote)
				}
				if sb.failed() == nil {
					t.Error("failed() = nil after a remote error")
				}
				return
			}
			if tt.err == nil && (err != nil || sb.failed() != nil) {
				t.Errorf("error = %v, failed() = %v; want nil", err, sb.failed())
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error = %v, want %v", err, tt.err)
			}
		})
	}
}

func FuzzSideband(f *testing.F) {
	for _, seed := range []string{
		pkt("\x01PACK") + "0000",
		pkt("\x02progress\r") + pkt("\x01PACK") + "0000",
		pkt("\x03fatal\n") + "0000",
		"0004", pkt("\x09x"), "0001", "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sb := newSidebandReader(newPktReader(bytes.NewReader(in)))
		got, err := io.ReadAll(sb)
		if int64(len(got)) != sb.data {
			t.Fatalf("read %d bytes, counted %d", len(got), sb.data)
		}
		if len(got) > len(in) {
			t.Fatalf("read %d bytes of data from %d bytes", len(got), len(in))
		}
		if (err == nil) != (sb.failed() == nil) {
			t.Fatalf("ReadAll error %v but failed() = %v", err, sb.failed())
		}
	})
}
