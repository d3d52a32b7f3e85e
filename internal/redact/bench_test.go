package redact_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"nuon.dev/nuon/internal/redact"
)

// benchLog is a 10 MB log with a secret on one line in a thousand.
func benchLog(secrets []string) string {
	rng := rand.New(rand.NewPCG(3, 4))
	var b strings.Builder
	for i := 0; b.Len() < 10<<20; i++ {
		fmt.Fprintf(&b, "2026-11-23T20:00:00Z INFO module.app.aws_instance.web[%d]: Still creating... [%ds elapsed] %s\n", i, i%60, randomText(rng, 40))
		if i%1000 == 0 {
			fmt.Fprintf(&b, "│ Error: invalid value %q for variable\n", secrets[i/1000%len(secrets)])
		}
	}
	return b.String()
}

func benchSecrets() map[string]string {
	m := map[string]string{}
	for i := range 10 {
		m[fmt.Sprintf("S%d", i)] = fmt.Sprintf("secret-%d-Zx9\"<&>'$%%{q} with spaces %d", i, i*7919)
	}
	return m
}

// BenchmarkRedact: String on a 10 MB log with 10 secrets, and on its
// first megabyte (the time per byte is the same: the search is linear).
func BenchmarkRedact(b *testing.B) {
	sec := benchSecrets()
	r, err := redact.New(sec)
	if err != nil {
		b.Fatal(err)
	}
	var vals []string
	for _, v := range sec {
		vals = append(vals, v)
	}
	full := benchLog(vals)
	for _, size := range []int{1 << 20, len(full)} {
		log := full[:size]
		b.Run(fmt.Sprintf("%dMB", size>>20), func(b *testing.B) {
			b.SetBytes(int64(len(log)))
			b.ReportAllocs()
			for b.Loop() {
				if out := r.String(log); !strings.Contains(out, redact.Marker) {
					b.Fatal("nothing redacted")
				}
			}
		})
	}
}

// BenchmarkWriter: the same log through a Writer, in 32 KiB writes.
func BenchmarkWriter(b *testing.B) {
	sec := benchSecrets()
	r, _ := redact.New(sec)
	var vals []string
	for _, v := range sec {
		vals = append(vals, v)
	}
	log := []byte(benchLog(vals))
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	for b.Loop() {
		w := r.Writer(io.Discard)
		for i := 0; i < len(log); i += 32 << 10 {
			w.Write(log[i:min(i+32<<10, len(log))])
		}
		w.Close()
	}
}

// BenchmarkNew: building a Redactor for 10 secrets.
func BenchmarkNew(b *testing.B) {
	sec := benchSecrets()
	for b.Loop() {
		if _, err := redact.New(sec); err != nil {
			b.Fatal(err)
		}
	}
}
