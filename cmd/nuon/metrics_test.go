package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"nuon.dev/nuon/internal/gittest"
	"nuon.dev/nuon/schemas"
)

// scrapeMetrics reads a Prometheus text exposition: series → value; nil
// when the endpoint does not answer.
func scrapeMetrics(url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestMetricsEndpoints runs nuon server and nuon-agent --metrics-addr and
// scrapes both: the agent's polls, jobs and reconciles and the server's
// polls and accepted pushes move as the agent converges; both are healthy
// and ready.
func TestMetricsEndpoints(t *testing.T) {
	st := newServerTenant(t)
	agentAddr := freeAddr(t)
	srv := st.startServer(t)
	srv.waitReady(t, 30*time.Second)
	server0 := scrapeMetrics(srv.url + "/metrics")

	agentLog := st.startAgent(t, srv, "acme", "--metrics-addr", agentAddr)
	logs := func() string { return "server:\n" + srv.log.String() + "\nagent:\n" + agentLog.String() }
	agentURL := "http://" + agentAddr
	if c := httpStatus(agentURL + "/readyz"); c == 200 {
		t.Logf("agent ready before its first pass? /readyz %d", c)
	}
	status := func() string {
		out, _ := gittest.Run(st.repo, nil, "rev-parse", "--verify", "--quiet", schemas.StatusRef("acme"))
		return out
	}
	waitFor(t, "acme's status through the server", 3*time.Minute, logs, func() bool { return status() != "" })
	waitFor(t, "the agent to be ready", time.Minute, logs, func() bool { return httpStatus(agentURL+"/readyz") == 200 })
	if c := httpStatus(agentURL + "/healthz"); c != 200 {
		t.Fatalf("agent /healthz %d", c)
	}

	a := scrapeMetrics(agentURL + "/metrics")
	for _, s := range []string{
		`nuon_agent_polls_total{result="ok"}`,
		`nuon_agent_fetches_total{result="ok"}`,
		`nuon_agent_status_pushes_total{result="ok"}`,
		`nuon_agent_reconciles_total{outcome="applied"}`,
		`nuon_agent_jobs_total{plugin="terraform",result="ok"}`,
		`nuon_agent_job_duration_seconds_count{plugin="terraform"}`,
		`nuon_agent_last_reconcile_success_timestamp_seconds`,
	} {
		if a[s] <= 0 {
			t.Errorf("agent %s = %v, want > 0", s, a[s])
		}
	}
	if ts := a[`nuon_agent_last_reconcile_success_timestamp_seconds`]; time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("last successful reconcile at %v", time.Unix(int64(ts), 0))
	}
	// Polls keep coming: the counter moves between two scrapes.
	polls := a[`nuon_agent_polls_total{result="ok"}`]
	waitFor(t, "the agent's next poll", 30*time.Second, logs, func() bool {
		return scrapeMetrics(agentURL + "/metrics")[`nuon_agent_polls_total{result="ok"}`] > polls
	})

	s := scrapeMetrics(srv.url + "/metrics")
	for _, k := range []string{`nuon_server_polls_total{result="ok"}`, `nuon_server_pushes_total{result="accepted"}`, `nuon_server_fetches_total{result="ok"}`} {
		if s[k] <= server0[k] {
			t.Errorf("server %s did not move: %v → %v", k, server0[k], s[k])
		}
	}
}
