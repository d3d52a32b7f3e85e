package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"nuon.dev/nuon/schemas"
)

// TestParseExample: the documented example parses into what it says.
func TestParseExample(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "customer-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type win struct {
		Name, Zone string
		Deny       bool
		Duration   time.Duration
		Times      []int
	}
	var got []win
	for _, w := range append(append([]Window{}, c.Allow...), c.Deny...) {
		got = append(got, win{w.Name, w.Location.String(), w.Deny, w.Duration, w.times})
	}
	want := []win{
		{"weeknights", "Europe/Berlin", false, 6 * time.Hour, []int{22 * 60}},
		{"first-sunday", "America/New_York", false, 4 * time.Hour, []int{3 * 60}},
		{"year-end-freeze", "Europe/Berlin", true, 432 * time.Hour, []int{0}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("windows (-want +got):\n%s", diff)
	}
	if !c.Held || c.Hold != "quarterly audit, ask ops@acme.example" || !c.Requests || len(c.Approvers) != 2 || c.Approvers[1].Key.Type() != "ecdsa-sha2-nistp256" {
		t.Errorf("hold %v %q, requests %v, approvers %+v", c.Held, c.Hold, c.Requests, c.Approvers)
	}
}

const head = "apiVersion: nuon.dev/v1\nkind: CustomerPolicy\n"

// TestParseProblems: each mistake is reported at its file, line and
// field, in words for the customer who will fix it.
func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"empty file", "", "p.yaml:1: file is empty"},
		{"not YAML", head + "hold: [\n", "p.yaml:4: invalid YAML: did not find expected node content"},
		{"unknown field", head + "hodl: {reason: x}\n", `p.yaml:3:1: hodl: unknown field "hodl"; known fields: allow, apiVersion, approvers, deny, hold, kind, requests, requireApproval, timezone`},
		{"hold without reason", head + "hold: {}\n", `p.yaml:3:7: hold: missing required field "reason"`},
		{"hold as a boolean", head + "hold: true\n", "p.yaml:3:7: hold: must be a mapping, not true or false"},
		{"unknown zone", head + "timezone: Europe/Berln\n", `p.yaml:3:11: timezone: unknown time zone "Europe/Berln"; name an IANA zone such as Europe/Berlin or UTC`},
		{"Local zone", head + "timezone: Local\n", `p.yaml:3:11: timezone: time zone "Local" depends on the agent's machine; name an IANA zone such as Europe/Berlin or UTC`},
		{"no zone", head + "allow:\n  - cron: \"0 2 * * *\"\n    duration: 1h\n", "p.yaml:4:5: allow[0]: no time zone: set timezone on the window or at the top of the file"},
		{"empty window", head + "timezone: UTC\ndeny:\n  - cron: \"0 2 * * *\"\n    duration: 0s\n", "p.yaml:6:15: deny[0].duration: 0s is an empty window; a window is open for at least 1m0s"},
		{"seconds", head + "timezone: UTC\ndeny:\n  - cron: \"0 2 * * *\"\n    duration: 90s\n", "p.yaml:6:15: deny[0].duration: 90s is not a whole number of minutes"},
		{"too long", head + "timezone: UTC\ndeny:\n  - cron: \"0 2 * * *\"\n    duration: 9000h\n", "p.yaml:6:15: deny[0].duration: 9000h is longer than 8784h0m0s (366 days)"},
		{"not a duration", head + "timezone: UTC\ndeny:\n  - cron: \"0 2 * * *\"\n    duration: 2d\n", `p.yaml:6:15: deny[0].duration: "2d" is not a duration such as 90s, 10m or 1h30m`},
		{"bad cron", head + "timezone: UTC\nallow:\n  - cron: \"0 25 * * *\"\n    duration: 1h\n", `p.yaml:5:11: allow[0].cron: cron "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"six fields", head + "timezone: UTC\nallow:\n  - cron: \"0 0 2 * * *\"\n    duration: 1h\n", `p.yaml:5:11: allow[0].cron: cron "0 0 2 * * *": expected exactly 5 fields, found 6: [0 0 2 * * *]`},
		{"every", head + "timezone: UTC\nallow:\n  - cron: \"@every 1h\"\n    duration: 1h\n", "p.yaml:5:11: allow[0].cron: @every is not a calendar: give start times (five fields, or @daily and the like)"},
		{"zone in cron", head + "timezone: UTC\nallow:\n  - cron: \"CRON_TZ=Asia/Tokyo 0 2 * * *\"\n    duration: 1h\n", "p.yaml:5:11: allow[0].cron: name the time zone in timezone, not in the cron expression"},
		{"never", head + "timezone: UTC\nallow:\n  - cron: \"0 0 30 2 *\"\n    duration: 1h\n", `p.yaml:5:11: allow[0].cron: "0 0 30 2 *" names no day that exists: the window would never open`},
		{"weekly and cron", head + "timezone: UTC\nallow:\n  - cron: \"0 2 * * *\"\n    days: [mon]\n    start: \"02:00\"\n    duration: 1h\n", "p.yaml:5:11: allow[0].cron: a window is weekly (days and start) or cron, not both"},
		{"no start times", head + "timezone: UTC\nallow:\n  - duration: 1h\n", "p.yaml:5:5: allow[0]: no start times: give days and start, or cron"},
		{"days without start", head + "timezone: UTC\nallow:\n  - days: [mon]\n    duration: 1h\n", "p.yaml:5:5: allow[0]: days without start: give the time of day the window opens, HH:MM"},
		{"no days", head + "timezone: UTC\nallow:\n  - days: []\n    start: \"02:00\"\n    duration: 1h\n", "p.yaml:5:11: allow[0].days: must list at least one item"},
		{"bad day", head + "timezone: UTC\nallow:\n  - days: [monday]\n    start: \"02:00\"\n    duration: 1h\n", `p.yaml:5:12: allow[0].days[0]: must be one of mon, tue, wed, thu, fri, sat or sun, not "monday"`},
		{"bad start", head + "timezone: UTC\nallow:\n  - days: [mon]\n    start: \"24:00\"\n    duration: 1h\n", `p.yaml:6:12: allow[0].start: "24:00" is not a time of day such as 02:00 or 22:30 (HH:MM, 24-hour clock)`},
		{"requests as text", head + "requests: \"no\"\n", "p.yaml:3:11: requests: must be true or false, not a string"},
		{"bad key", head + "approvers:\n  - name: alice\n    key: ssh-ed25519 AAAA\n", "p.yaml:5:10: approvers[0].key: not an OpenSSH public key (type, base64 data and an optional comment)"},
		{"rsa key", head + "approvers:\n  - name: alice\n    key: ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC0HvtCL/ehH5CDtUWHnv69TU2I0POgGmzzwpjmb0+CxSYUHtOdGfHAKawo57EnhcIlO4793xqr3F0AJrh4P6DSx4Mpdv/qV2v6KdqxC4RGtBJ1rzBafHP0fTPVCtIANiMLHnZLN+rqryr0j5AhFOhSmpTl3Ch7Yu6jTF7zAu6eut4n2iMjIO2TI1kIkdjqvvpCmpMSi3vYUZoFfe9ndKZ1wf8xiRrwann6MfxrYl9n7PubHgL8/kJn/yGc4XeG1bQSq1CNGqOoz1Lo3GtPlZLM3g70L+qvccI7CNiuzb2tlGFgiQnvzY6ihwciK08nepDYcbIR2KDWD4rhUKqXooXP rsa@acme.example\n", "p.yaml:5:10: approvers[0].key: a ssh-rsa key; approval keys are ssh-ed25519, sk-ssh-ed25519@openssh.com, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, sk-ecdsa-sha2-nistp256@openssh.com"},
		{"key twice", head + "approvers:\n  - name: alice\n    key: " + acmeKey + "\n  - name: bob\n    key: " + acmeKey + "\n", "p.yaml:7:10: approvers[1].key: key SHA256:7HL/uhfqsBO2LGvrotcRA8IScVfT4iSdz/2bKZt/59E is listed twice (first at approvers[0])"},
		{"name twice", head + "approvers:\n  - name: alice\n    key: " + acmeKey + "\n  - name: alice\n    key: " + acmeKey + "\n", `p.yaml:6:11: approvers[1].name: approver "alice" is listed twice (first at approvers[0])`},
		{"two problems", head + "timezone: Mars/Olympus\ndeny:\n  - cron: \"0 2 * * *\"\n    duration: 0m\n", "p.yaml:3:11: timezone: unknown time zone \"Mars/Olympus\"; name an IANA zone such as Europe/Berlin or UTC\np.yaml:6:15: deny[0].duration: 0m is an empty window; a window is open for at least 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("no error; want %s", tc.want)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

var acmeKey = func() string {
	b, err := os.ReadFile(filepath.Join("..", "fixtures", "keys", "acme.pub"))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}()

// TestLoadMissing: a policy file that is not there is an error naming
// it, never an empty policy.
func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "policy.yaml"))
	if err == nil || !strings.Contains(err.Error(), "policy.yaml: no such file") {
		t.Fatalf("Load of a missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte(head+"#"+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load of a large file: %v", err)
	}
}

// TestDecide: what a decision says, and when.
func TestDecide(t *testing.T) {
	policy := func(body string) *Customer {
		c, err := Parse("p.yaml", []byte(head+body))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Wednesday 2 January 2030.
	at := func(hhmm string) time.Time {
		t, _ := time.Parse("2006-01-02 15:04 MST", "2030-01-02 "+hhmm+" UTC")
		return t
	}
	nights := "timezone: Europe/Berlin\nallow:\n  - name: nights\n    days: [mon, tue, wed, thu, fri]\n    start: \"22:00\"\n    duration: 4h\n"
	freeze := "deny:\n  - name: freeze\n    cron: \"0 22 2 1 *\"\n    duration: 2h\n    timezone: UTC\n"
	for _, tc := range []struct {
		name   string
		policy string
		now    time.Time
		want   Decision
	}{
		{"no rules", "", at("12:00"), Decision{Allowed: true}},
		{"hold", "hold: {reason: audit}\n" + nights, at("22:00"), Decision{Reason: schemas.DeferredHold, Message: "held by the customer: audit"}},
		{"inside the window", nights, at("21:30"), Decision{Allowed: true, Window: "nights"}},
		{"before the window", nights, at("12:00"), Decision{Reason: schemas.DeferredWindow, Window: "nights",
			Message: "outside every allow window; changes may go ahead at 2030-01-02T22:00:00+01:00 (nights)", Opens: at("21:00")}},
		{"deny wins", nights + freeze, at("22:30"), Decision{Reason: schemas.DeferredWindow, Window: "freeze",
			Message: "inside deny window \"freeze\"; changes may go ahead at 2030-01-03T01:00:00+01:00 (nights)", Opens: at("00:00").Add(24 * time.Hour)}},
		{"only deny", freeze, at("23:59"), Decision{Reason: schemas.DeferredWindow, Window: "freeze",
			Message: "inside deny window \"freeze\"; changes may go ahead at 2030-01-03T00:00:00Z (freeze)", Opens: at("00:00").Add(24 * time.Hour)}},
		{"after the deny", freeze, at("00:00").Add(24 * time.Hour), Decision{Allowed: true}},
		{"never again", "timezone: UTC\nallow:\n  - cron: \"0 0 29 2 *\"\n    duration: 1h\ndeny:\n  - cron: \"0 0 1 1 *\"\n    duration: 8784h\n", at("12:00"),
			Decision{Reason: schemas.DeferredWindow, Window: "deny[0]", Message: "inside deny window \"deny[0]\"; no window opens within 366 days"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(policy(tc.policy), tc.now)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseJSON: the file may be JSON as well, with the same checks.
func TestParseJSON(t *testing.T) {
	c, err := Parse("p.json", []byte(`{"apiVersion": "nuon.dev/v1", "kind": "CustomerPolicy", "requests": false,
  "deny": [{"name": "freeze", "cron": "0 0 15 12 *", "duration": "432h", "timezone": "Asia/Tokyo"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests || c.Held || len(c.Deny) != 1 || c.Deny[0].Location.String() != "Asia/Tokyo" {
		t.Errorf("parsed %+v", c)
	}
	_, err = Parse("p.json", []byte(`{"apiVersion": "nuon.dev/v1", "kind": "CustomerPolicy",
  "allow": [{"cron": "0 2 * * *", "duration": "1h", "timezone": "Nowhere/Else"}]}`))
	if want := `p.json:2:65: allow[0].timezone: unknown time zone "Nowhere/Else"; name an IANA zone such as Europe/Berlin or UTC`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
