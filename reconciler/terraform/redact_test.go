package terraform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRedactor(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{
			name: "no secrets",
			in:   "value = s3cr3t\n",
			want: "value = s3cr3t\n",
		},
		{
			name:    "plain",
			secrets: []string{"s3cr3t"},
			in:      "value = s3cr3t, again s3cr3t\n",
			want:    "value = (redacted), again (redacted)\n",
		},
		{
			name:    "quoted in a plan",
			secrets: []string{`a"b\c`},
			in:      `+ key = "a\"b\\c"` + "\n" + `raw a"b\c` + "\n",
			want:    `+ key = "(redacted)"` + "\n" + `raw (redacted)` + "\n",
		},
		{
			name:    "longest first",
			secrets: []string{"abc", "abcdef"},
			in:      "abcdef abc\n",
			want:    "(redacted) (redacted)\n",
		},
		{
			name:    "empty secret ignored",
			secrets: []string{""},
			in:      "nothing to hide\n",
			want:    "nothing to hide\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := newRedactor(&buf)
			r.secrets(tt.secrets)
			n, err := r.Write([]byte(tt.in))
			if err != nil || n != len(tt.in) {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(tt.in))
			}
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRedactorError(t *testing.T) {
	r := newRedactor(&bytes.Buffer{})
	r.secrets([]string{"hunter2"})
	err := r.redactError(fmt.Errorf("exit status 1: invalid value hunter2: %w", context.Canceled))
	if got, want := err.Error(), "exit status 1: invalid value (redacted): context canceled"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false", err)
	}
	plain := errors.New("nothing secret")
	if got := r.redactError(plain); got != plain {
		t.Errorf("redactError changed an error without secrets: %v", got)
	}
}

// TestRedactorConcurrent writes stdout and stderr at once, as
// terraform-exec does, into a writer that is not safe for concurrent use.
func TestRedactorConcurrent(t *testing.T) {
	var buf bytes.Buffer
	r := newRedactor(&buf)
	r.secrets([]string{"s3cr3t"})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 100 {
				_, _ = r.Write([]byte("line s3cr3t\n"))
			}
		})
	}
	wg.Wait()
	if got, want := buf.Len(), 200*len("line (redacted)\n"); got != want {
		t.Errorf("wrote %d bytes, want %d", got, want)
	}
}
