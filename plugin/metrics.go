package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nri-handover/nri-handover/handover"
	hapi "github.com/nri-handover/nri-handover/handover/api"
)

// eventKind is an NRI event the harness gates; an index into eventNames
// and metrics.events, so that counting an event looks nothing up.
type eventKind int

const (
	evRunPodSandbox eventKind = iota
	evUpdatePodSandbox
	evPostUpdatePodSandbox
	evStopPodSandbox
	evRemovePodSandbox
	evCreateContainer
	evPostCreateContainer
	evStartContainer
	evPostStartContainer
	evUpdateContainer
	evPostUpdateContainer
	evStopContainer
	evRemoveContainer
	evValidateContainerAdjustment
	numEvents
)

// eventNames are the events' names, as metric labels and in logs.
var eventNames = [numEvents]string{
	"RunPodSandbox", "UpdatePodSandbox", "PostUpdatePodSandbox", "StopPodSandbox", "RemovePodSandbox",
	"CreateContainer", "PostCreateContainer", "StartContainer", "PostStartContainer",
	"UpdateContainer", "PostUpdateContainer", "StopContainer", "RemoveContainer",
	"ValidateContainerAdjustment",
}

func (e eventKind) String() string { return eventNames[e] }

// eventResult is how an event ended, counted by nri_handover_events_total.
type eventResult int

const (
	resultActed          eventResult = iota
	resultSkipped                    // this instance did not own the plugin
	resultSkippedStamped             // another instance had stamped the container
	numResults
)

// resultNames are the results' metric labels.
var resultNames = [numResults]string{"acted", "skipped", "skipped_stamped"}

// metrics holds an instance's Prometheus metrics in a registry of its own,
// so several instances can live in one process (tests, the demo).
type metrics struct {
	reg       *prometheus.Registry
	handovers *prometheus.CounterVec
	switches  prometheus.Histogram
	badStamps prometheus.Counter
	// events[event][result], resolved once so the hot path does no label lookup.
	events [numEvents][numResults]prometheus.Counter
}

func newMetrics(p *Plugin) *metrics {
	constLabels := prometheus.Labels{"plugin": p.cfg.name}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nri_handover_handovers_total", ConstLabels: constLabels,
			Help: "Claims, yield requests and promotions of this instance, by outcome.",
		}, []string{"outcome"}),
		switches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nri_handover_switch_duration_seconds", ConstLabels: constLabels,
			Help:    "Time from the start of a claim to this instance owning the plugin (claims that won).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14), // 100 µs .. 0.8 s
		}),
		badStamps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_handover_invalid_stamps_total", ConstLabels: constLabels,
			Help: "Stamps that did not verify (forged, malformed, other key); treated as absent.",
		}),
	}
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_handover_events_total", ConstLabels: constLabels,
		Help: "NRI events seen by this instance, by event and result (acted, skipped, skipped_stamped).",
	}, []string{"event", "result"})
	for e, name := range eventNames {
		for r, result := range resultNames {
			m.events[e][r] = events.WithLabelValues(name, result)
		}
	}
	roles := []hapi.Role{RoleJoining, RoleOwner, RoleStandby, RoleRetired}
	for _, r := range roles {
		r := r
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_handover_role", ConstLabels: prometheus.Labels{"plugin": p.cfg.name, "role": handover.RoleName(r)},
			Help: "1 for the role this instance has now, 0 for the others.",
		}, func() float64 {
			if p.coord.Status().Role == r {
				return 1
			}
			return 0
		}))
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nri_handover_info",
		ConstLabels: prometheus.Labels{"plugin": p.cfg.name, "version": p.version.Original(),
			"instance": p.self.Id, "policy": p.cfg.policy.Name()},
		Help: "Constant 1, labelled with the plugin's version, instance and policy.",
	})
	info.Set(1)
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_handover_epoch", ConstLabels: constLabels,
			Help: "Ownership epoch this instance last took part in.",
		}, func() float64 { return float64(p.coord.Status().Epoch) }),
		info, m.handovers, m.switches, m.badStamps, events,
	)
	return m
}

// outcome records a coordinator outcome.
func (m *metrics) outcome(o handover.Outcome, took time.Duration) {
	m.handovers.WithLabelValues(string(o)).Inc()
	switch o {
	case handover.OutcomeFirstOwner, handover.OutcomeTookOver, handover.OutcomeForced,
		handover.OutcomeTookBack, handover.OutcomePromoted:
		m.switches.Observe(took.Seconds())
	}
}

func (m *metrics) event(e eventKind, r eventResult) { m.events[e][r].Inc() }

// Handler serves /metrics (Prometheus text format), /healthz (200 while the
// instance runs) and /readyz (200 only while this instance owns the plugin;
// 503 with the reason otherwise). Mount it on your own server, or use
// WithMetricsAddr to have the harness serve it.
func (p *Plugin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok: %s\n", handover.RoleName(p.Role()))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := p.Ready()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// serveHTTP serves Handler on addr until ctx ends.
func (p *Plugin) serveHTTP(ctx context.Context, addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.WithError(err).Warn("metrics endpoint stopped")
		}
	}()
	p.log.WithField("addr", l.Addr().String()).Info("serving /metrics, /healthz, /readyz")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
