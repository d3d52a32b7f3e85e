package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"nuon.dev/nuon/agent"
	"nuon.dev/nuon/agent/jobs"
	"nuon.dev/nuon/schemas"
)

// Results, the values of the result label.
const (
	ResultOK      = "ok"
	ResultFailed  = "failed"
	ResultRefused = "refused"
	ResultError   = "error"
)

// Metrics holds an agent's series and its readiness.
type Metrics struct {
	reg *prometheus.Registry

	polls, fetches, pushes *prometheus.CounterVec
	reconciles             *prometheus.CounterVec
	lastSuccess            prometheus.Gauge
	jobs                   *prometheus.CounterVec
	jobDuration            *prometheus.HistogramVec
	syncBytes              prometheus.Counter

	mu      sync.Mutex
	passed  bool  // a pass succeeded once
	lastErr error // of the last pass
}

// New returns an agent's metrics, registered in their own registry with
// the Go, process and build-info collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_agent_polls_total",
			Help: "Polls of the desired and status refs, by result (ok, error).",
		}, []string{"result"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_agent_fetches_total",
			Help: "Fetches of desired state, by result (ok, error).",
		}, []string{"result"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_agent_status_pushes_total",
			Help: "Pushes of status commits, by result (ok, error).",
		}, []string{"result"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_agent_reconciles_total",
			Help: "Reconcile passes, by outcome (idle, applied, deferred, refused, stale, failed).",
		}, []string{"outcome"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_agent_last_reconcile_success_timestamp_seconds",
			Help: "Unix time of the last reconcile pass that ended without error.",
		}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_agent_jobs_total",
			Help: "Plugin jobs run, by plugin and result (ok, failed: the job reported an error, refused, error: it did not run to a result).",
		}, []string{"plugin", "result"}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nuon_agent_job_duration_seconds",
			Help:    "Time a plugin job ran, by plugin.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
		}, []string{"plugin"}),
		syncBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nuon_agent_artifact_sync_bytes_total",
			Help: "Bytes of artifacts read from the vendor registry and copied into the install registry.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		m.polls, m.fetches, m.pushes, m.reconciles, m.lastSuccess, m.jobs, m.jobDuration, m.syncBytes,
	)
	for _, r := range []string{ResultOK, ResultError} {
		m.polls.WithLabelValues(r)
		m.pushes.WithLabelValues(r)
	}
	return m
}

// Handler serves /metrics, /healthz and /readyz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", m.readyz)
	return mux
}

func (m *Metrics) readyz(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	passed, err := m.passed, m.lastErr
	m.mu.Unlock()
	switch {
	case !passed && err == nil:
		http.Error(w, "not ready: no reconcile pass finished yet", http.StatusServiceUnavailable)
	case err != nil:
		// The error is already redacted by the agent.
		http.Error(w, "not ready: last reconcile failed: "+err.Error(), http.StatusServiceUnavailable)
	default:
		io.WriteString(w, "ok\n")
	}
}

// Observe records a reconcile pass; it is agent.Config.Observe.
func (m *Metrics) Observe(rep *agent.Report, err error) {
	outcome := agent.OutcomeFailed
	if rep != nil && rep.Outcome != "" {
		outcome = rep.Outcome
	}
	if err != nil {
		outcome = agent.OutcomeFailed
	}
	m.reconciles.WithLabelValues(outcome).Inc()
	m.mu.Lock()
	m.lastErr = err
	if err == nil {
		m.passed = true
		m.lastSuccess.SetToCurrentTime()
	}
	m.mu.Unlock()
}

// Copied counts artifact bytes; it is sync.Config.Copied.
func (m *Metrics) Copied(n int64) { m.syncBytes.Add(float64(n)) }

func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultOK
}

// Remote counts r's polls, fetches and pushes.
func (m *Metrics) Remote(r agent.Remote) agent.Remote { return &remote{r, m} }

type remote struct {
	agent.Remote
	m *Metrics
}

var _ agent.Remote = (*remote)(nil)

func (r *remote) Heads(ctx context.Context, names ...plumbing.ReferenceName) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	h, err := r.Remote.Heads(ctx, names...)
	r.m.polls.WithLabelValues(result(err)).Inc()
	return h, err
}

func (r *remote) Fetch(ctx context.Context, st storage.Storer, want plumbing.Hash) error {
	err := r.Remote.Fetch(ctx, st, want)
	r.m.fetches.WithLabelValues(result(err)).Inc()
	return err
}

func (r *remote) Push(ctx context.Context, st storage.Storer, ref plumbing.ReferenceName, old, new plumbing.Hash) error {
	err := r.Remote.Push(ctx, st, ref, old, new)
	r.m.pushes.WithLabelValues(result(err)).Inc()
	return err
}

// Runner counts r's jobs by plugin and result, and times them.
func (m *Metrics) Runner(r jobs.Runner) jobs.Runner { return &runner{r, m} }

type runner struct {
	jobs.Runner
	m *Metrics
}

var _ jobs.EnvRunner = (*runner)(nil)

func (r *runner) Run(ctx context.Context, job *schemas.Job, dir string) (*schemas.JobResult, error) {
	start := time.Now()
	res, err := r.Runner.Run(ctx, job, dir)
	r.count(job, start, res, err)
	return res, err
}

// RunEnv is the wrapped runner's RunEnv; a runner without one fails the
// job.
func (r *runner) RunEnv(ctx context.Context, job *schemas.Job, dir string, env []string) (*schemas.JobResult, error) {
	er, ok := r.Runner.(jobs.EnvRunner)
	if !ok {
		return nil, fmt.Errorf("job %s: this job runner cannot give a job extra environment", job.ID)
	}
	start := time.Now()
	res, err := er.RunEnv(ctx, job, dir, env)
	r.count(job, start, res, err)
	return res, err
}

func (r *runner) count(job *schemas.Job, start time.Time, res *schemas.JobResult, err error) {
	out := ResultOK
	switch {
	case err != nil || res == nil:
		out = ResultError
	case res.Refused:
		out = ResultRefused
	case res.Error != "":
		out = ResultFailed
	}
	r.m.jobs.WithLabelValues(job.Plugin, out).Inc()
	r.m.jobDuration.WithLabelValues(job.Plugin).Observe(time.Since(start).Seconds())
}
