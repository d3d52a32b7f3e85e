package tfstate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStateSecretSuffix(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	endsInNumber := regexp.MustCompile(`-[0-9]+$`)
	seen := map[string]string{}
	for _, c := range [][2]string{
		{"acme", "network"},
		{"acme", "db-2"},
		{"acme-db", "2"},
		{"Acme_Corp", "API.v2"},
		{strings.Repeat("i", 80), strings.Repeat("c", 80)},
		{"", ""},
		{"acme", "network "},
	} {
		s := StateSecretSuffix(c[0], c[1])
		if len(s) > 59 || !label.MatchString(s) || endsInNumber.MatchString(s) {
			t.Errorf("StateSecretSuffix(%q, %q) = %q: not a label value of at most 59 characters without a -<number> end", c[0], c[1], s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("StateSecretSuffix(%q, %q) = %q, as for %s", c[0], c[1], s, other)
		}
		seen[s] = c[0] + "/" + c[1]
	}
	if got, want := StateSecretSuffix("acme", "network"), StateSecretSuffix("acme", "network"); got != want {
		t.Errorf("not stable: %q, %q", got, want)
	}
	if got := StateLeaseName("x"); got != "lock-tfstate-default-x" {
		t.Errorf("StateLeaseName = %q", got)
	}
	if got := StateSecretName("x"); got != "tfstate-default-x" {
		t.Errorf("StateSecretName = %q", got)
	}
}

func TestParseLockError(t *testing.T) {
	real, err := os.ReadFile(filepath.Join("testdata", "lock", "plan-locked.txt"))
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 23, 22, 47, 31, 113906158, time.UTC)
	for _, tt := range []struct {
		name   string
		out    string
		want   LockInfo
		wantOK bool
	}{
		{"terraform 1.11 plan", string(real), LockInfo{ID: "40290185-f2dc-28ad-e50d-695851c37436", Operation: "OperationTypeApply", Who: "root@vm", Version: "1.11.4", Created: created}, true},
		{"other error", "exit status 1\n\nError: Invalid reference\n\n  ID: not-a-lock\n", LockInfo{}, false},
		{"no lock info", "Error: Error acquiring the state lock\n\nError message: connection refused\n", LockInfo{}, false},
		{"no id", "Error: Error acquiring the state lock\nLock Info:\n  Who: x@y\n\n", LockInfo{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseLockError(tt.out)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if d := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); d != "" {
				t.Errorf("lock (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseLeaseLock(t *testing.T) {
	got, err := ParseLeaseLock(`{"ID":"40290185-f2dc-28ad-e50d-695851c37436","Operation":"OperationTypeApply","Info":"","Who":"root@vm","Version":"1.11.4","Created":"2026-11-23T22:47:31.113906158Z","Path":""}`)
	if err != nil {
		t.Fatal(err)
	}
	want := LockInfo{ID: "40290185-f2dc-28ad-e50d-695851c37436", Operation: "OperationTypeApply", Who: "root@vm", Version: "1.11.4",
		Created: time.Date(2026, 11, 23, 22, 47, 31, 113906158, time.UTC)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("lock (-want +got):\n%s", d)
	}
	for _, bad := range []string{"", "{}", `{"ID":""}`, "not json"} {
		if _, err := ParseLeaseLock(bad); err == nil {
			t.Errorf("ParseLeaseLock(%q) = nil error", bad)
		}
	}
}

// FuzzParseLockError checks that any terraform output parses without
// panicking, and that a lock it reports has an ID without line breaks.
func FuzzParseLockError(f *testing.F) {
	real, err := os.ReadFile(filepath.Join("testdata", "lock", "plan-locked.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(real))
	f.Add("Error: Error acquiring the state lock\nLock Info:\n  ID: x\n")
	f.Add("Lock Info:\nError acquiring the state lock")
	f.Fuzz(func(t *testing.T, out string) {
		l, ok := ParseLockError(out)
		if ok && (l.ID == "" || strings.ContainsAny(l.ID, "\r\n")) {
			t.Errorf("lock ID %q", l.ID)
		}
		if !ok && l != (LockInfo{}) {
			t.Errorf("not ok but %+v", l)
		}
	})
}

// FuzzParseLeaseLock checks that any annotation parses without panicking.
func FuzzParseLeaseLock(f *testing.F) {
	f.Add(`{"ID":"40290185-f2dc-28ad-e50d-695851c37436","Operation":"OperationTypeApply","Who":"root@vm","Created":"2026-11-23T22:47:31.113906158Z"}`)
	f.Add(`{"ID":""}`)
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := ParseLeaseLock(s); err == nil && l.ID == "" {
			t.Errorf("no error but no ID")
		}
	})
}
