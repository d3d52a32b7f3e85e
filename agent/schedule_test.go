package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/schemas"
)

// TestParallelismBound runs six independent components and one that
// depends on the first, with Concurrency 3. Each job records when it
// started and ended and waits at a barrier until three have started: the
// bound must be reached (3 at once) and never exceeded, and the dependent
// one must start only after its dependency ended.
func TestParallelismBound(t *testing.T) {
	const (
		independent = 6
		limit       = 3
	)
	tn := newTenant(t)
	dir := t.TempDir()
	var app strings.Builder
	app.WriteString("name: test\ncomponents:\n")
	var pins []string
	names := []string{}
	for i := 1; i <= independent; i++ {
		names = append(names, fmt.Sprintf("p%d", i))
	}
	names = append(names, "q")
	for _, name := range names {
		fmt.Fprintf(&app, "  - name: %s\n    type: terraform\n    repository: registry.test/app/%s\n", name, name)
		fmt.Fprintf(&app, "    inputs: {barrier: \"${install.inputs.barrier}\", barrier_n: \"%d\"}\n", limit)
		if name == "q" {
			app.WriteString("    dependsOn: [p1]\n")
		}
		pins = append(pins, name+": 1.0.0")
		tn.write("releases/"+name+".yaml", release(name, "1.0.0"))
	}
	tn.write("nuon.yaml", app.String())
	tn.write("channels/stable.yaml", "components: {"+strings.Join(pins, ", ")+"}\n")
	for _, c := range []string{"a", "b", "c", "d"} {
		if err := os.Remove(filepath.Join(tn.src, "releases", c+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	for id, key := range tn.keys {
		tn.write("installs/"+id+".yaml", fmt.Sprintf("channel: stable\ninputs: {barrier: %q}\ncloud: {provider: local}\nsandbox: {name: local}\nregistry: 127.0.0.1:5000/%s\nagentKey: %s\n", dir, id, key.AuthorizedKey()))
	}
	tn.commit("seven components")
	tn.renderMain()

	a := tn.agent("acme", func(c *agent.Config) { c.Concurrency = limit })
	st := a.reconcile(t).Status
	if st.Phase != schemas.InstallReady {
		t.Fatalf("phase %s: %+v", st.Phase, st.Components)
	}
	type event struct {
		at    int64
		delta int
	}
	var events []event
	stamp := func(name, what string) int64 {
		data, err := os.ReadFile(filepath.Join(dir, name+"."+what))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, name := range names {
		events = append(events, event{stamp(name, "start"), +1}, event{stamp(name, "end"), -1})
	}
	// An end and a start at the same instant do not overlap.
	sort.Slice(events, func(i, j int) bool {
		if events[i].at != events[j].at {
			return events[i].at < events[j].at
		}
		return events[i].delta < events[j].delta
	})
	running, most := 0, 0
	for _, e := range events {
		running += e.delta
		most = max(most, running)
	}
	if most != limit {
		t.Errorf("at most %d jobs ran at once, want exactly %d (the bound reached, never exceeded)", most, limit)
	}
	if q, p1 := stamp("q", "start"), stamp("p1", "end"); q < p1 {
		t.Errorf("q started %v before its dependency p1 ended", p1-q)
	}
}
