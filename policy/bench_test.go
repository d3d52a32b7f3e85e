package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkDecide: one decision, as the agent makes it every pass.
// allowed: the documented example without its hold, inside a window;
// deferred: outside every window, with the next opening searched;
// many: 50 allow and 50 deny cron windows, deferred.
func BenchmarkDecide(b *testing.B) {
	example := head + `timezone: Europe/Berlin
allow:
  - {name: weeknights, days: [mon, tue, wed, thu], start: "22:00", duration: 6h}
  - {name: first-sunday, cron: "0 3 1-7 * *", duration: 4h, timezone: America/New_York}
deny:
  - {name: year-end-freeze, cron: "0 0 15 12 *", duration: 432h}
`
	var many strings.Builder
	many.WriteString(head + "timezone: America/New_York\nallow:\n")
	for i := range 50 {
		fmt.Fprintf(&many, "  - {cron: \"%d 3 * * %d\", duration: 30m}\n", i, i%7)
	}
	many.WriteString("deny:\n")
	for i := range 50 {
		fmt.Fprintf(&many, "  - {cron: \"%d 4 %d * *\", duration: 2h}\n", i, 1+i%28)
	}
	for _, bc := range []struct {
		name, policy string
		now          time.Time
	}{
		{"allowed", example, time.Date(2030, 1, 1, 22, 30, 0, 0, time.UTC)},
		{"deferred", example, time.Date(2030, 1, 4, 12, 0, 0, 0, time.UTC)},
		{"many", many.String(), time.Date(2030, 3, 10, 12, 0, 0, 0, time.UTC)},
	} {
		c, err := Parse("p.yaml", []byte(bc.policy))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				Decide(c, bc.now)
			}
		})
	}
}

// BenchmarkParse: reading the documented example, as the agent does every
// pass.
func BenchmarkParse(b *testing.B) {
	data := []byte(head + "timezone: Europe/Berlin\nallow:\n  - {name: weeknights, days: [mon, tue, wed, thu], start: \"22:00\", duration: 6h}\nhold: {reason: audit}\n")
	for b.Loop() {
		if _, err := Parse("p.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
