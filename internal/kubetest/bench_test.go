package kubetest

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nuon.dev/nuon/internal/oci/ocitest"
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

// BenchmarkNode starts a node for a running server, runs one pod of an
// image from a local registry to completion and stops the node: ready-s is
// StartNode to a Ready Node, pod-s a created pod to Succeeded (pull,
// sandbox, network, container), stop-s the Stop that leaves nothing.
func BenchmarkNode(b *testing.B) {
	assets := RequireNode(b)
	srv := New(b, WithControllerManager())
	reg := ocitest.Start(b, ocitest.Options{})
	ctx := context.Background()
	image := pushProbe(ctx, b, reg.Host)
	cs := srv.Clientset(b)
	ns := srv.Namespace(b)
	var ready, pod, stop time.Duration
	for b.Loop() {
		dir, err := os.MkdirTemp("", "kn-")
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		n, err := StartNode(ctx, srv, assets, dir, NodeOptions{HTTPRegistries: []string{reg.Host}})
		if err != nil {
			b.Fatal(err)
		}
		ready += time.Since(began)
		began = time.Now()
		p := restrictedPod(n.Name, image)
		p.Name = n.Name
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if got.Status.Phase == corev1.PodSucceeded {
				break
			}
			if got.Status.Phase == corev1.PodFailed || time.Since(began) > 2*time.Minute {
				b.Fatalf("pod %s: %s %s", p.Name, got.Status.Phase, podWaiting(got))
			}
			time.Sleep(20 * time.Millisecond)
		}
		pod += time.Since(began)
		began = time.Now()
		if err := n.Stop(); err != nil {
			b.Fatal(err)
		}
		stop += time.Since(began)
		os.RemoveAll(dir)
	}
	for name, d := range map[string]time.Duration{"ready-s": ready, "pod-s": pod, "stop-s": stop} {
		b.ReportMetric(d.Seconds()/float64(b.N), name)
	}
}
