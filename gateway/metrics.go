package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own so
// that several gateways can live in one process (the tests do).
type metrics struct {
	registry     *prometheus.Registry
	connections  prometheus.Gauge
	pods         prometheus.Gauge
	envelopesIn  prometheus.Counter
	deliveries   prometheus.Counter
	writes       prometheus.Counter
	errors       *prometheus.CounterVec
	refusals     *prometheus.CounterVec
	cuts         *prometheus.CounterVec
	conclusions  *prometheus.CounterVec
	historyHolds prometheus.Counter
	historyLate  prometheus.Counter
}

func newMetrics(activeContexts func() float64, historyState func() (entries, bytes float64)) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpp_connections", Help: "Open participant connections."}),
		pods: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpp_pods", Help: "Pods that exist (with participants or contexts)."}),
		envelopesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_envelopes_in_total", Help: "Envelopes accepted and published to their pod."}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_envelopes_out_total", Help: "Envelopes queued for delivery to a participant (one per recipient)."}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_websocket_messages_out_total", Help: "WebSocket messages written (a batch counts once)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_errors_total", Help: "system/error answers, by code."}, []string{"code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_upgrade_refusals_total", Help: "Refused WebSocket upgrades, by code."}, []string{"code"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_cuts_total", Help: "Participants cut by the gateway, by reason: slow_consumer (4008, send queue full), write_timeout, ping_timeout."}, []string{"reason"}),
		conclusions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_context_conclusions_total", Help: "Contexts concluded, by reason."}, []string{"reason"}),
		historyHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_history_holds_total", Help: "Times a pod's frames stayed unseen for 1s and were held, then republished, until the history stream answered again."}),
		historyLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_history_late_total", Help: "Frames of this node that did not come back from the history stream in their place (discarded before they were read, or never taken while later ones were), republished to be delivered late rather than lost."}),
	}
	m.registry.MustRegister(m.connections, m.pods, m.envelopesIn, m.deliveries, m.writes,
		m.errors, m.refusals, m.cuts, m.conclusions, m.historyHolds, m.historyLate,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_contexts_active", Help: "Active contexts in all pods."}, activeContexts),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_history_entries", Help: "Entries the history stream holds, all pods together (live frames' markers included)."},
			func() float64 { e, _ := historyState(); return e }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_history_bytes", Help: "Bytes the history stream holds, all pods together (bounded by --history-bytes)."},
			func() float64 { _, b := historyState(); return b }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}
