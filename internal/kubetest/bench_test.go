package kubetest

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/internal/testenv"
)

// BenchmarkStart starts and stops the control plane, without and with
// kube-controller-manager. Besides wall time it reports the CPU time of
// the processes it started (cpu-s/op), the steadier figure on a loaded
// machine.
func BenchmarkStart(b *testing.B) {
	assets, err := Assets()
	if err != nil {
		testenv.Missing(b, "%v", err)
	}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"apiserver", nil},
		{"controller-manager", []Option{WithControllerManager()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				dir, err := os.MkdirTemp("", "kubetest-bench-")
				if err != nil {
					b.Fatal(err)
				}
				before := childCPU()
				s, err := Start(context.Background(), assets, dir, c.opts...)
				if err != nil {
					os.RemoveAll(dir)
					b.Fatal(err)
				}
				if err := s.Stop(); err != nil {
					b.Error(err)
				}
				cpu += childCPU() - before
				os.RemoveAll(dir)
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// childCPU is the user and system time of the waited-for children.
func childCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
