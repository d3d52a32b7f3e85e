package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzSeeds are policy files for the fuzz targets to start from.
func fuzzSeeds(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "customer-policy.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		head,
		head + "hold: {reason: audit}\n",
		head + "timezone: America/New_York\nallow:\n  - days: [sun]\n    start: \"02:30\"\n    duration: 90m\n",
		head + "timezone: Australia/Lord_Howe\nallow:\n  - cron: \"0,30 1,2 * * *\"\n    duration: 15m\ndeny:\n  - cron: \"@monthly\"\n    duration: 48h\n",
		head + "timezone: UTC\nallow:\n  - cron: \"0 0 29 2 *\"\n    duration: 1h\n",
		"{\"apiVersion\": \"nuon.dev/v1\", \"kind\": \"CustomerPolicy\", \"requests\": false}",
		head + "hold: [\n",
	} {
		f.Add([]byte(s), int64(1893456000))
	}
}

// FuzzParse: any file is parsed or refused without a panic, and a policy
// that parses decides consistently: when a change is not allowed, the
// opening it names is in the future, allowed, and the first such instant
// (the second before it is not).
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, unix int64) {
		c, err := Parse("p.yaml", data)
		if err != nil {
			return
		}
		now := time.Unix(unix%(1<<34), 0).UTC() // within the years 1970-2514
		d := Decide(c, now)
		switch {
		case d.Allowed && (d.Reason != "" || !d.Opens.IsZero()):
			t.Fatalf("allowed with a reason or an opening: %+v", d)
		case d.Allowed:
			return
		case d.Reason == "" || d.Message == "":
			t.Fatalf("deferred without a reason: %+v", d)
		case d.Opens.IsZero():
			return
		case !d.Opens.After(now):
			t.Fatalf("at %s opens at %s, not later", now, d.Opens)
		}
		if !Decide(c, d.Opens).Allowed {
			t.Fatalf("at %s opens at %s, when a change is not allowed", now, d.Opens)
		}
		if before := d.Opens.Add(-time.Second); before.After(now) && Decide(c, before).Allowed {
			t.Fatalf("at %s opens at %s, but %s is allowed already", now, d.Opens, before)
		}
	})
}
