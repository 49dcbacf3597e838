package pod

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// Metrics a team can alert on per pod (docs/protocol.md section 7): its
// members, envelopes and bytes in and out, refusals by code, MCP calls
// and how long they waited, pending proposals, slow consumers cut, each
// with the label pod, beside the gateway-wide metrics.
//
// /metrics must stay small at 6,000 pods, so at most MaxLabelled pods
// are named (--metrics-max-pods); the pods opened while that many are
// named are counted together under pod="other" (a pod named "other"
// always is). A named pod's slot is freed, and its series deleted, when
// the pod closes on this node (its last participant left and its
// contexts are gone): a pod that opens again starts its counters from
// zero, which Prometheus' rate() and increase() read as a restart.
//
// Delivery stays as fast as before: a pod resolves its series once, when
// it opens (podMetrics), and the fan-out adds to them with one atomic add
// each per envelope (not per recipient), never a lookup by name.

// DefaultMetricsMaxPods is how many pods /metrics names by default
// (--metrics-max-pods): 100 pods of some 30 series each (the histogram's
// 17 included, and a few codes of refusals) are some 3,000 series, which
// a scrape every 15 s carries easily.
const DefaultMetricsMaxPods = 100

// OtherPods is the label of the pods counted together.
const OtherPods = "other"

// callBuckets are the bounds, in seconds, of the histogram of MCP calls'
// durations: a tool answers in milliseconds to minutes, and a call waits
// at most --mcp-request-timeout (60 s by default).
var callBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// PodMetrics are the per-pod series of a node, and which pods they name.
type PodMetrics struct {
	members, pending                                          *prometheus.GaugeVec
	envIn, envOut, bytesIn, bytesOut, slow, calls, unanswered *prometheus.CounterVec
	refusals                                                  *prometheus.CounterVec
	callSeconds                                               *prometheus.HistogramVec

	mu  sync.Mutex
	max int
	// named are the pods named, each with how many of this node's pods
	// of that name are open (one, but for a moment two: a pod that
	// closes while another of its name opens).
	named map[string]int
}

func newPodMetrics() *PodMetrics {
	pod := []string{"pod"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, pod)
	}
	return &PodMetrics{
		max:   DefaultMetricsMaxPods,
		named: map[string]int{},
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mcpp_pod_members",
			Help: "Members of the pod on this node: WebSocket connections and MCP participants (observers not counted)."}, pod),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "mcpp_pod_proposals_pending",
			Help: "Proposals (mcp/proposal) of the pod waiting for a decision."}, pod),
		envIn: counter("mcpp_pod_envelopes_in_total", "Envelopes this node accepted into the pod."),
		envOut: counter("mcpp_pod_envelopes_out_total",
			"Envelopes (presence and the gateway's events included) this node queued for the pod's members, one per recipient."),
		bytesIn:  counter("mcpp_pod_bytes_in_total", "Bytes of the envelopes this node accepted into the pod."),
		bytesOut: counter("mcpp_pod_bytes_out_total", "Bytes queued for the pod's members on this node, an envelope's bytes once per recipient."),
		slow:     counter("mcpp_pod_slow_consumers_total", "Members of the pod this node cut as slow consumers (4008: their send queue was full)."),
		calls: counter("mcpp_pod_tool_calls_total",
			"MCP calls (mcp/request with a JSON-RPC id: tools/call and every other method) this node accepted in the pod."),
		unanswered: counter("mcpp_pod_tool_calls_unanswered_total",
			"MCP calls of the pod the gateway answered for their recipient: timeout, recipient_left, recipient_absent."),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mcpp_pod_refusals_total",
			Help: "Envelopes and requests of the pod refused (system/error), by code."}, []string{"pod", "code"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mcpp_pod_tool_call_duration_seconds",
			Help:    "How long the pod's MCP calls accepted on this node waited for their answer (the recipient's, or the gateway's).",
			Buckets: callBuckets}, pod),
	}
}

// SetMaxPods sets how many pods are named (--metrics-max-pods); call it
// before the first pod opens.
func (m *PodMetrics) SetMaxPods(n int) {
	m.mu.Lock()
	m.max = n
	m.mu.Unlock()
}

// Named reports how many pods are named now.
func (m *PodMetrics) Named() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.named)
}

func (m *PodMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.members, m.pending, m.envIn, m.envOut, m.bytesIn, m.bytesOut, m.slow, m.calls,
		m.unanswered, m.refusals, m.callSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mcpp_metrics_pods_named",
			Help: "Pods named in the per-pod series (at most --metrics-max-pods); the others are pod=\"other\"."},
			func() float64 { return float64(m.Named()) })}
}

// podMetrics are one pod's series, resolved when it opens, and what it
// added to the gauges, taken back when it closes (the pods under "other"
// share the series).
type podMetrics struct {
	of                                                        *PodMetrics
	label                                                     string
	envIn, envOut, bytesIn, bytesOut, slow, calls, unanswered prometheus.Counter
	members, pending                                          prometheus.Gauge
	callSeconds                                               prometheus.Observer
	// nMembers and nPending are the pod's share of the gauges. Change
	// them with Pod.mu held.
	nMembers, nPending int
	closed             bool // a pod may be closed twice (Pod.Close)
}

// open names pod name, if a slot is free, and resolves its series.
func (m *PodMetrics) open(name string) *podMetrics {
	label := OtherPods
	m.mu.Lock()
	switch n, ok := m.named[name]; {
	case ok:
		m.named[name] = n + 1
		label = name
	case name != OtherPods && len(m.named) < m.max:
		m.named[name] = 1
		label = name
	}
	m.mu.Unlock()
	return &podMetrics{of: m, label: label,
		envIn: m.envIn.WithLabelValues(label), envOut: m.envOut.WithLabelValues(label),
		bytesIn: m.bytesIn.WithLabelValues(label), bytesOut: m.bytesOut.WithLabelValues(label),
		slow: m.slow.WithLabelValues(label), calls: m.calls.WithLabelValues(label),
		unanswered: m.unanswered.WithLabelValues(label),
		members:    m.members.WithLabelValues(label), pending: m.pending.WithLabelValues(label),
		callSeconds: m.callSeconds.WithLabelValues(label)}
}

// close takes the pod's share out of the gauges and, for a named pod
// that was the last of its name, frees its slot and deletes its series.
// The gauges move no more afterwards (a closed pod's members still leave
// it). Call it with Pod.mu held.
func (pm *podMetrics) close() {
	if pm.closed {
		return
	}
	pm.setMembers(0)
	pm.addPending(-pm.nPending)
	pm.closed = true
	if pm.label == OtherPods {
		return
	}
	m := pm.of
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.named[pm.label]--; m.named[pm.label] > 0 {
		return
	}
	delete(m.named, pm.label)
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.members, m.pending, m.envIn, m.envOut,
		m.bytesIn, m.bytesOut, m.slow, m.calls, m.unanswered, m.callSeconds} {
		v.DeleteLabelValues(pm.label)
	}
	m.refusals.DeletePartialMatch(prometheus.Labels{"pod": pm.label})
}

// setMembers sets the pod's members on this node to n. Call it with
// Pod.mu held.
func (pm *podMetrics) setMembers(n int) {
	if d := n - pm.nMembers; d != 0 && !pm.closed {
		pm.members.Add(float64(d))
		pm.nMembers = n
	}
}

// addPending counts d more pending proposals. Call it with Pod.mu held.
func (pm *podMetrics) addPending(d int) {
	if d != 0 && !pm.closed {
		pm.pending.Add(float64(d))
		pm.nPending += d
	}
}

// refused counts a refusal of code.
func (pm *podMetrics) refused(code string) {
	pm.of.refusals.WithLabelValues(pm.label, code).Inc()
}

// delivered counts n deliveries of an envelope of size bytes, here and
// gateway-wide: one add each, whatever n.
func (p *Pod) delivered(n, size int) {
	if n == 0 {
		return
	}
	p.node.Metrics.Deliveries.Add(float64(n))
	p.m.envOut.Add(float64(n))
	p.m.bytesOut.Add(float64(n * size))
}

// countMembers sets the pod's members gauge to its members here. Call it
// with Pod.mu held, after a change of members or guests.
func (p *Pod) countMembers() { p.m.setMembers(len(p.members) + len(p.guests)) }

// Cut counts a member of the pod that the gateway cut, for reason
// (participant.Cut…).
func (p *Pod) Cut(reason string) {
	if reason == participant.CutSlowConsumer {
		p.m.slow.Inc()
	}
}

// callEnded counts the end of call c, answered (by the gateway, for its
// recipient, when byGateway) after it waited since c.at, on the node
// that accepted it. The gateway's own calls (Ask) are not the pod's.
// Call it with Pod.mu held.
func (p *Pod) callEnded(c *call, byGateway bool) {
	if c == nil || c.origin != p.node.ID || c.requester == wire.GatewayID {
		return
	}
	p.m.callSeconds.Observe(timeNow().Sub(c.at).Seconds())
	if byGateway {
		p.m.unanswered.Inc()
	}
}
