// Command probe is the program of TestNodeRestrictedPod's pod: it reports
// what the pod may do to its own container, one "key: value" line each,
// to stdout and /dev/termination-log, and exits 0 once it has tried all.
// With the argument "wait" it reports nothing and waits for SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		<-c
		return
	}
	var lines []string
	report := func(key string, err error) {
		v := "ok"
		if err != nil {
			v = err.Error()
		}
		lines = append(lines, key+": "+v)
	}
	report("write /probe", os.WriteFile("/probe", []byte("x"), 0o644))
	report("write /tmp/probe", os.WriteFile("/tmp/probe", []byte("x"), 0o644))
	lines = append(lines, fmt.Sprintf("uid: %d", os.Getuid()))
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Seccomp:") || strings.HasPrefix(l, "NoNewPrivs:") || strings.HasPrefix(l, "CapEff:") {
				k, v, _ := strings.Cut(l, ":")
				lines = append(lines, strings.ToLower(k)+": "+strings.TrimSpace(v))
			}
		}
	}
	out := strings.Join(lines, "\n") + "\n"
	fmt.Print(out)
	_ = os.WriteFile("/dev/termination-log", []byte(out), 0o644)
}
