// Package metrics gives a harness plugin Prometheus metrics and an HTTP
// endpoint, for the binaries that import it: one that does not links no
// Prometheus client. Import it for its effect,
//
//	import _ "github.com/nri-handover/nri-handover/plugin/metrics"
//
// and every plugin.Plugin of the process keeps the metrics below, served on
// the address of plugin.WithMetricsAddr (-handover-metrics-addr) while it
// runs, or mount Handler on a server of your own:
//
//	nri_handover_role{role}                      1 for the instance's role
//	nri_handover_epoch                           ownership epoch last taken part in
//	nri_handover_info{version,instance,policy}   constant 1
//	nri_handover_handovers_total{outcome}        claims, yields, promotions
//	nri_handover_switch_duration_seconds         claim start to owning
//	nri_handover_invalid_stamps_total            stamps that did not verify
//	nri_handover_events_total{event,result}      events acted on or skipped
//
// all labelled with the plugin's name.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/nri-handover/nri-handover/handover"
	"github.com/nri-handover/nri-handover/internal/observe"
	"github.com/nri-handover/nri-handover/internal/protocol"
	"github.com/nri-handover/nri-handover/plugin"
)

func init() {
	observe.New = func(info observe.Info) observe.Observer { return newMetrics(info) }
}

// metrics holds an instance's Prometheus metrics in a registry of its own,
// so several instances can live in one process (tests, the demo).
type metrics struct {
	reg       *prometheus.Registry
	handovers *prometheus.CounterVec
	switches  prometheus.Histogram
	badStamps prometheus.Counter
	inDoubt   prometheus.Counter
	gaps      prometheus.Counter
	// events[event][result], resolved once so the hot path does no label lookup.
	events [observe.NumEvents][observe.NumResults]prometheus.Counter
	plugin *plugin.Plugin // whose Handler Serve serves
}

func newMetrics(info observe.Info) *metrics {
	constLabels := prometheus.Labels{"plugin": info.Name}
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
		inDoubt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_handover_in_doubt_total", ConstLabels: constLabels,
			Help: "Events a dead owner was inside of when this instance took over: acted on at most once (or at least once with WithAtLeastOnce).",
		}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nri_handover_gaps_total", ConstLabels: constLabels,
			Help: "Takeovers by this instance that found no instance acting since the last event acted on: events in that window reached no instance of the plugin.",
		}),
	}
	m.plugin, _ = info.Plugin.(*plugin.Plugin)
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_handover_events_total", ConstLabels: constLabels,
		Help: "NRI events seen by this instance, by event and result (acted, skipped, skipped_stamped).",
	}, []string{"event", "result"})
	for e, name := range observe.EventNames {
		for r, result := range observe.ResultNames {
			m.events[e][r] = events.WithLabelValues(name, result)
		}
	}
	for _, r := range []handover.Role{handover.RoleJoining, handover.RoleOwner, handover.RoleStandby, handover.RoleRetired} {
		r := r
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_handover_role", ConstLabels: prometheus.Labels{"plugin": info.Name, "role": r.String()},
			Help: "1 for the role this instance has now, 0 for the others.",
		}, func() float64 {
			if info.Role() == r {
				return 1
			}
			return 0
		}))
	}
	infoGauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nri_handover_info",
		ConstLabels: prometheus.Labels{"plugin": info.Name, "version": info.Version,
			"instance": info.Instance, "policy": info.Policy},
		Help: "Constant 1, labelled with the plugin's version, instance and policy.",
	})
	infoGauge.Set(1)
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nri_handover_epoch", ConstLabels: constLabels,
			Help: "Ownership epoch this instance last took part in.",
		}, func() float64 { return float64(info.Epoch()) }),
		infoGauge, m.handovers, m.switches, m.badStamps, m.inDoubt, m.gaps, events,
	)
	return m
}

// Outcome records a coordinator outcome.
func (m *metrics) Outcome(o protocol.Outcome, took time.Duration) {
	m.handovers.WithLabelValues(string(o)).Inc()
	switch o {
	case protocol.OutcomeFirstOwner, protocol.OutcomeTookOver, protocol.OutcomeForced,
		protocol.OutcomeTookBack, protocol.OutcomePromoted:
		m.switches.Observe(took.Seconds())
	}
}

// Event counts an event.
func (m *metrics) Event(e observe.Event, r observe.Result) { m.events[e][r].Inc() }

// BadStamp counts a stamp that did not verify.
func (m *metrics) BadStamp() { m.badStamps.Inc() }

// InDoubt counts an event in doubt.
func (m *metrics) InDoubt() { m.inDoubt.Inc() }

// Gap counts a takeover after a window in which no instance acted.
func (m *metrics) Gap(time.Duration) { m.gaps.Inc() }

// Handler serves p's /metrics (Prometheus text format), /healthz (200
// while the instance runs) and /readyz (200 only while p owns the plugin
// and is connected; 503 with the reason otherwise).
func Handler(p *plugin.Plugin) http.Handler {
	mux := http.NewServeMux()
	if m, ok := observe.Of(p).(*metrics); ok {
		mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok: %s\n", p.Role())
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

// Serve serves Handler on addr until ctx ends or stop is called; the
// harness calls it for plugin.WithMetricsAddr.
func (m *metrics) Serve(ctx context.Context, addr string) (stop func(), err error) {
	if m.plugin == nil {
		return nil, errors.New("metrics of an unknown plugin")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: Handler(m.plugin), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logrus.WithError(err).Warn("metrics endpoint stopped")
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
