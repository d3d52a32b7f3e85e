package rollout_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"nuon.dev/nuon/rollout"
)

// BenchmarkFleet measures assigning the waves of a channel of 100,000
// installs from memory, as the rollout controller does when main moves
// (the install files it read before are not read again): a selector
// canary of a region, then 1 %, 10 %, 50 % and the rest.
func BenchmarkFleet(b *testing.B) {
	const n = 100000
	p := policy(b, "    - {name: canary, selector: {matchLabels: {region: eu}}, count: 10}\n    - {percent: 1}\n    - {percent: 10}\n    - {percent: 50}\n    - {rest: true}\n")
	ins := make([]rollout.FleetInstall, n)
	for i := range ins {
		region := "us"
		if i%7 == 0 {
			region = "eu"
		}
		ins[i] = rollout.FleetInstall{Install: rollout.Install{ID: fmt.Sprintf("i%06d", i), Labels: map[string]string{"region": region}}, Channel: "stable"}
	}
	policies := map[string]*rollout.Policy{"stable": p}
	cpu0, runs := cpuTime(), 0
	for b.Loop() {
		if _, err := rollout.Fleet(policies, ins); err != nil {
			b.Fatal(err)
		}
		runs++
	}
	// CPU, not wall time, is what the figure compares on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(runs), "cpu-ms/op")
}

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
