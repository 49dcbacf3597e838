package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
)

// auditCollectors count the audit trail's lines: written, and dropped by
// reason (queue_full: the writer was behind, a slow or blocked disk;
// write_error: a write failed, a full disk). All zero when it is off.
func auditCollectors(trail *audit.Log) []prometheus.Collector {
	dropped := func(reason string, of func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mcpp_audit_dropped_total",
			Help:        "Audit lines lost: queue_full (the trail's writer was behind: a slow or blocked disk), write_error (a write failed: a full disk).",
			ConstLabels: prometheus.Labels{"reason": reason}}, of)
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mcpp_audit_lines_total",
			Help: "Audit lines written (--audit-log)."}, func() float64 { return float64(trail.Written()) }),
		dropped("queue_full", func() float64 {
			full, _ := trail.Dropped()
			return float64(full)
		}),
		dropped("write_error", func() float64 {
			_, failed := trail.Dropped()
			return float64(failed)
		}),
	}
}

// metrics are the gateway's Prometheus metrics, on a registry of its own so
// that several gateways can live in one process (the tests do). The pods
// move their own (pod.Metrics), registered here with the rest.
type metrics struct {
	registry     *prometheus.Registry
	connections  prometheus.Gauge
	writes       prometheus.Counter
	refusals     *prometheus.CounterVec
	cuts         *prometheus.CounterVec
	historyHolds prometheus.Counter
	historyLate  prometheus.Counter
}

func newMetrics(podMetrics *pod.Metrics, activeContexts func() float64, historyState func() (entries, bytes float64), historyCache func() history.CacheStats, historyAnswers func() history.Answers, trail *audit.Log) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpp_connections", Help: "Open participant connections."}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_websocket_messages_out_total", Help: "WebSocket messages written (a batch counts once)."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_upgrade_refusals_total", Help: "Refused WebSocket upgrades, by code."}, []string{"code"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpp_cuts_total", Help: "Participants cut by the gateway, by reason: slow_consumer (4008, send queue full), write_timeout, ping_timeout."}, []string{"reason"}),
		historyHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_history_holds_total", Help: "Times the history stream stopped acknowledging and this node held what came next, then sent again what it had not acknowledged, once it answered."}),
		historyLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpp_history_late_total", Help: "Messages of this node sent again to the history stream after it did not acknowledge them (stored late, or once after all, never lost)."}),
	}
	m.registry.MustRegister(podMetrics.Collectors()...)
	m.registry.MustRegister(m.connections, m.writes, m.refusals, m.cuts, m.historyHolds, m.historyLate,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_contexts_active", Help: "Active contexts in all pods."}, activeContexts),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_history_entries", Help: "Messages the history stream holds, all pods together (a message holds one entry or a batch of a pod's entries; live frames' markers included)."},
			func() float64 { e, _ := historyState(); return e }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_history_bytes", Help: "Bytes the history stream holds, all pods together (bounded by --history-bytes)."},
			func() float64 { _, b := historyState(); return b }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_answers_late_total", Help: "Answers of the history stream that came after this node's writer had given up on them (it sent the message again)."},
			func() float64 { return float64(historyAnswers().Late) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_in_process_total", Help: "Answers of the history stream that another copy of the message is on its way in (the writer asks again 200 ms later)."},
			func() float64 { return float64(historyAnswers().InProcess) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_follow_bridged_total", Help: "Messages of the history stream this node's follower read by direct gets while its consumer was lost."},
			func() float64 { return float64(historyAnswers().Bridged) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_follow_from_leader_total", Help: "Of those, the messages the stream's leader gave, past a replica that lacked them."},
			func() float64 { return float64(historyAnswers().FromLeader) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_cache_hits_total", Help: "History messages a replay, resume or history page took from the node's cache (--history-cache), not the stream."},
			func() float64 { return float64(historyCache().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mcpp_history_cache_misses_total", Help: "History messages a replay, resume or history page read from the stream, not in the node's cache (--history-cache)."},
			func() float64 { return float64(historyCache().Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpp_history_cache_bytes", Help: "Memory the node's cache of the history stream's messages takes, in bytes (it grows as it fills, up to --history-cache)."},
			func() float64 { return float64(historyCache().Bytes) }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.registry.MustRegister(auditCollectors(trail)...)
	// Every reason is served from the start, at 0, so that an alert on
	// its increase sees the first cut.
	for _, reason := range []string{participant.CutSlowConsumer, participant.CutWriteTimeout, participant.CutPingTimeout} {
		m.cuts.WithLabelValues(reason)
	}
	return m
}
