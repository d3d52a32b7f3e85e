package server

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"nuon.dev/nuon/fleet"
	"nuon.dev/nuon/internal/signature/request"
)

// Refusal reasons, the label values of nuon_server_refusals_total: a
// fixed set, so a hostile client cannot grow the series.
const (
	reasonNoAuth         = "no_auth"
	reasonMalformedAuth  = "malformed_auth"
	reasonExpired        = "expired"
	reasonUnknownInstall = "unknown_install"
	reasonBadSignature   = "bad_signature"
	reasonReplay         = "replayed_signature"
	reasonBodyDigest     = "body_not_signed"
	reasonProtocolV0     = "protocol_v0"
	reasonMalformed      = "malformed_request"
	reasonCommand        = "command"
	reasonWant           = "want_not_own"
	reasonForeignRef     = "foreign_ref"
	reasonDelete         = "delete"
	reasonStale          = "stale"
	reasonNoKey          = "no_agent_key"
	reasonNotAccepted    = "push_not_accepted"
	reasonTooLarge       = "push_too_large"
	reasonWriterRefused  = "writer_refused"
	reasonOther          = "other"
	reasonViewLogin      = "view_login"
	reasonReplicaToken   = "replica_token"
	reasonArchived       = "archived"
	reasonInstallBusy    = "install_busy"
	reasonHook           = "hook_signature"
	resultOK             = "ok"
	resultRefused        = "refused"
	resultError          = "error"
	resultRendered       = "rendered"
	resultUnchanged      = "unchanged"
	resultProblems       = "problems"
	resultAccepted       = "accepted"
)

// authReason is the refusal reason of a request whose signature failed.
func authReason(err error) string {
	switch {
	case errors.Is(err, request.ErrNoAuth):
		return reasonNoAuth
	case errors.Is(err, request.ErrMalformed):
		return reasonMalformedAuth
	case errors.Is(err, request.ErrExpired):
		return reasonExpired
	case errors.Is(err, request.ErrUnknownInstall):
		return reasonUnknownInstall
	case errors.Is(err, request.ErrBadSignature):
		return reasonBadSignature
	case errors.Is(err, request.ErrReplay):
		return reasonReplay
	}
	return reasonOther
}

// metrics are the server's Prometheus series. Nothing is labelled by
// install: a fleet of 100,000 installs is as many series as one of ten.
// Installs by phase and status age come from the fleet view's snapshot
// (fleetCollector), computed when refs move, not on every scrape.
type metrics struct {
	reg *prometheus.Registry

	renders        *prometheus.CounterVec
	renderDuration prometheus.Histogram
	renderChanged  prometheus.Counter
	mainChecks     *prometheus.CounterVec
	polls          *prometheus.CounterVec
	pollsOK        prometheus.Counter // polls{result="ok"}, resolved once: it counts every poll
	fetches        *prometheus.CounterVec
	pushes         *prometheus.CounterVec
	pushDuration   prometheus.Histogram
	refusals       *prometheus.CounterVec
	mirrors        *prometheus.CounterVec
	replicaSyncs   *prometheus.CounterVec
	replicaLast    prometheus.Gauge
	forwarded      *prometheus.CounterVec
	retired        *prometheus.CounterVec
	connsOpen      prometheus.Gauge
	connsShed      *prometheus.CounterVec

	// Repository maintenance (maintenance.go).
	maintenanceRuns     *prometheus.CounterVec
	maintenanceDuration *prometheus.HistogramVec
	looseObjects        prometheus.Gauge
	packs               prometheus.Gauge
	packBytes           prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_renders_total",
			Help: "Renders of a new main, by result (rendered, problems: main does not render, error).",
		}, []string{"result"}),
		renderDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nuon_server_render_duration_seconds",
			Help:    "Time to render a new main into install refs.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
		renderChanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nuon_server_render_installs_changed_total",
			Help: "Installs whose desired state a render changed.",
		}),
		mainChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_main_polls_total",
			Help: "Checks of main (poll interval or webhook; with an upstream, a fetch), by result (unchanged, rendered, problems, error).",
		}, []string{"result"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_polls_total",
			Help: "Agent polls (protocol v2 ls-refs) answered from the ref table, by result (ok, refused).",
		}, []string{"result"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_fetches_total",
			Help: "Agent fetches (git upload-pack), by result (ok, refused, error).",
		}, []string{"result"}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_pushes_total",
			Help: "Agent status pushes, by result (accepted, refused, error).",
		}, []string{"result"}),
		pushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nuon_server_push_duration_seconds",
			Help:    "Time to accept or refuse a status push: reading its pack, the checks and the writes.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_refusals_total",
			Help: "Requests refused, by reason (a fixed set; each refusal is also logged with its install).",
		}, []string{"reason"}),
		mirrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_mirror_pushes_total",
			Help: "Pushes of rendered and status refs to the upstream git host, by result (ok, error).",
		}, []string{"result"}),
		replicaSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_replica_refreshes_total",
			Help: "A read replica's refreshes of its mirror from the writer, by result (ok, error).",
		}, []string{"result"}),
		replicaLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_server_replica_last_refresh_timestamp_seconds",
			Help: "Unix time of a read replica's last successful refresh from the writer.",
		}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_pushes_forwarded_total",
			Help: "Status pushes a read replica forwarded to the writer, by result (ok: the writer answered, error).",
		}, []string{"result"}),
		retired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_archived_installs_retired_total",
			Help: "Archived installs whose refs the server dropped (moving what the archive lacked under it, upstream too), by result (ok, error: kept, retried at the next check of main).",
		}, []string{"result"}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_server_connections_open",
			Help: "Connections open, counted under the cap (Limits.MaxConns).",
		}),
		connsShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_connections_shed_total",
			Help: "Connections closed at the cap to make room for a new one, by state (idle: between requests, new: no request yet).",
		}, []string{"state"}),
		maintenanceRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nuon_server_maintenance_runs_total",
			Help: "Repository maintenance tasks run (geometric-repack, commit-graph, pack-refs), by task and result (ok, error).",
		}, []string{"task", "result"}),
		maintenanceDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nuon_server_maintenance_duration_seconds",
			Help:    "Time each repository maintenance task took, at the lowest CPU and I/O priority.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"task"}),
		looseObjects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_server_repository_loose_objects",
			Help: "Loose objects in the repository after the last maintenance (git count-objects).",
		}),
		packs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_server_repository_packs",
			Help: "Packs in the repository after the last maintenance.",
		}),
		packBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nuon_server_repository_pack_bytes",
			Help: "Bytes of the repository's packs after the last maintenance.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		m.renders, m.renderDuration, m.renderChanged, m.mainChecks,
		m.polls, m.fetches, m.pushes, m.pushDuration, m.refusals, m.mirrors, m.replicaSyncs, m.replicaLast, m.forwarded, m.retired,
		m.connsOpen, m.connsShed,
		m.maintenanceRuns, m.maintenanceDuration, m.looseObjects, m.packs, m.packBytes,
	)
	// Zero series for the results a dashboard alerts on, so that rate()
	// works before the first event.
	for _, r := range []string{resultOK, resultRefused} {
		m.polls.WithLabelValues(r)
	}
	m.pollsOK = m.polls.WithLabelValues(resultOK)
	for _, r := range []string{resultAccepted, resultRefused, resultError} {
		m.pushes.WithLabelValues(r)
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// refused counts a refusal.
func (m *metrics) refused(reason string) { m.refusals.WithLabelValues(reason).Inc() }

// observePush counts a push that ended with result after start.
func (m *metrics) observePush(result string, start time.Time) {
	m.pushes.WithLabelValues(result).Inc()
	m.pushDuration.Observe(time.Since(start).Seconds())
}

// fleetCollector reports installs by state and the age of their newest
// status from the fleet view's index, which moves only with the installs
// that moved: a handful of series whatever the size of the fleet.
type fleetCollector struct{ v *view }

var (
	installsDesc = prometheus.NewDesc("nuon_server_installs",
		"Installs by state (the agent's reported phase, Stale, or Unreported before the first status).", []string{"state"}, nil)
	// Quiet, as the fleet view says it: Stale means a desired state past
	// its signed expiry, never an old status.
	quietDesc = prometheus.NewDesc("nuon_server_installs_status_quiet",
		"Installs whose newest status is older than the view's quiet age (ViewStaleAfter), or that never reported.", nil, nil)
	ageDesc = prometheus.NewDesc("nuon_server_status_age_seconds",
		"Age of each install's newest status commit, as a histogram over the fleet.", nil, nil)
	statusAgeBuckets = []float64{30, 60, 120, 300, 600, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}
	contactAgeDesc   = prometheus.NewDesc("nuon_server_contact_age_seconds",
		"Seconds since each install's last signed contact (a poll, a fetch or a push its key signed), as a histogram over the installs the server has heard from; on a replica, its own and the writer's.", nil, nil)
	unreachableDesc = prometheus.NewDesc("nuon_server_installs_unreachable",
		"Installs Unreachable: no signed contact, nor status commit, for longer than twice the heartbeat their status announces.", nil, nil)
	contactedDesc = prometheus.NewDesc("nuon_server_installs_contacted",
		"Installs the server knows a signed contact of (since its liveness file began).", nil, nil)
	indexReadyDesc = prometheus.NewDesc("nuon_server_fleet_index_ready",
		"1 once the fleet view's index, which the installs series come from, is built; 0 while it is (the series are left out).", nil, nil)
	contactAgeBuckets = []float64{10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}
)

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- installsDesc
	ch <- quietDesc
	ch <- ageDesc
	ch <- contactAgeDesc
	ch <- unreachableDesc
	ch <- contactedDesc
	ch <- indexReadyDesc
}

// metricsIndexWait is how long a scrape waits for the fleet view's first
// index: a small fleet is indexed within it; a large one is reported once
// built, never read in a scrape.
const metricsIndexWait = 3 * time.Second

// indexStarted holds the views whose first index a scrape started (a
// server without a view token builds none at start).
var indexStarted sync.Map

// Collect reports the fleet from the view's index, which moves one
// install at a time as refs move: a scrape reads no install's state. It
// brings the index up to the refs (what moved since the last look) and
// takes the counts by state and the status times it keeps (statusTimes):
// a few searches, whatever the size of the fleet. Before the first index is built (in the background, never
// in a scrape: at 1,000,000 installs it reads every desired state), the
// fleet series are left out and nuon_server_fleet_index_ready is 0.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.v
	b := v.build
	c.collectContacts(ch, v.s.cfg.Now())
	if v.s.cfg.ViewToken == "" && v.s.cfg.NoFleetMetrics {
		return
	}
	if _, loaded := indexStarted.LoadOrStore(v, true); !loaded && v.s.cfg.ViewToken == "" {
		go v.buildIndex()
	}
	t := time.NewTimer(metricsIndexWait)
	defer t.Stop()
	select {
	case <-b.ready:
	case <-t.C:
		ch <- prometheus.MustNewConstMetric(indexReadyDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(indexReadyDesc, prometheus.GaugeValue, 1)
	v.mu.Lock()
	defer v.mu.Unlock()
	x, err := v.update()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(installsDesc, err)
		return
	}
	// Kept as the index is patched (statusTimes): a scrape walks no
	// install.
	count, sum, buckets, older := x.times.ages(x.now, statusAgeBuckets, v.s.cfg.ViewStaleAfter)
	quiet := older + x.summary.Installs - x.times.n // and those that never reported
	states := x.summary.States
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(installsDesc, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(quietDesc, prometheus.GaugeValue, float64(quiet))
	ch <- prometheus.MustNewConstHistogram(ageDesc, count, sum, buckets)
	ch <- prometheus.MustNewConstMetric(unreachableDesc, prometheus.GaugeValue, float64(states[fleet.StateUnreachable]))
}

// collectContacts reports the age of every install's last signed contact
// (liveness.go): one pass over the table, a histogram, no series per
// install.
func (c *fleetCollector) collectContacts(ch chan<- prometheus.Metric, now time.Time) {
	buckets := make(map[float64]uint64, len(contactAgeBuckets))
	var count uint64
	var sum float64
	c.v.s.live.m.Range(func(_, v any) bool {
		ns := v.(*contact).at.Load()
		if ns == 0 {
			return true
		}
		age := max(now.Sub(time.Unix(0, ns)).Seconds(), 0)
		count++
		sum += age
		for _, b := range contactAgeBuckets {
			if age <= b {
				buckets[b]++
			}
		}
		return true
	})
	ch <- prometheus.MustNewConstMetric(contactedDesc, prometheus.GaugeValue, float64(count))
	ch <- prometheus.MustNewConstHistogram(contactAgeDesc, count, sum, buckets)
}
