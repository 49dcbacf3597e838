package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// maxHeaderBytes bounds the upgrade request's headers (and so its query).
const maxHeaderBytes = 32 << 10

// refuse answers a refused upgrade or HTTP request with the JSON body of
// docs/protocol.md section 1 (wire.Refusal) and the code's HTTP status.
func (g *Gateway) refuse(w http.ResponseWriter, e *envelope.Error) {
	g.refuseWith(w, e.Code.HTTPStatus(), e)
}

// refuseWith is refuse with a status of its own: the two refusals of a
// publish request whose status is not its code's (405, 415).
func (g *Gateway) refuseWith(w http.ResponseWriter, status int, e *envelope.Error) {
	g.metrics.refusals.WithLabelValues(string(e.Code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.Refusal{Code: e.Code, Message: e.Message})
}

// admission is what the checks before the upgrade decided.
type admission struct {
	pod      string
	who      pod.Admitted
	protocol string
	filter   *filter.Filter
	history  pod.HistoryWant
	// serves is what the participant says it answers requests of
	// (serves=mcp); observe that it watches without being present
	// (observe=1).
	serves  []string
	observe bool
}

// transport is how the admitted participant is in the pod, as the audit
// trail names it.
func (a *admission) transport() string {
	if a.observe {
		return audit.TransportObserve
	}
	return audit.TransportWS
}

// admit runs every check that can refuse an upgrade with an HTTP answer,
// before anything is allocated for the participant (an OAuth challenge
// goes on w's header). The admission is returned with the refusal too, as
// far as it got (the audit trail's record of the refusal).
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request) (*admission, *envelope.Error) {
	q := r.URL.Query()
	a := &admission{protocol: wire.ProtocolMCPP, observe: q.Get(wire.QueryObserve) == "1"}
	if !g.originAllowed(r) {
		return a, envelope.Errorf(wire.CodeForbidden,
			"origin %q may not connect (see --allowed-origins)", r.Header.Get("Origin")).Ruled(audit.RuleOrigin)
	}
	a.pod = q.Get("pod")
	if a.pod == "" {
		if a.pod = q.Get("topic"); a.pod != "" {
			a.protocol = wire.ProtocolMCPX // topic is the MCPx name
		}
	}
	if !envelope.ValidPodName(a.pod) {
		return a, envelope.Errorf(wire.CodeInvalidPod, "pod must be 1 to 64 characters of [A-Za-z0-9._-]")
	}
	switch v := q.Get("protocol"); v {
	case "":
	case wire.ProtocolMCPP, wire.ProtocolMCPX:
		a.protocol = v
	default:
		return a, envelope.Errorf(wire.CodeUnsupportedProtocol, "protocol must be %s or %s", wire.ProtocolMCPP, wire.ProtocolMCPX)
	}

	var e *envelope.Error
	if a.who, e = g.authenticate(w, r, a.pod, true); e != nil {
		return a, e
	}
	f, err := filter.FromQuery(q)
	if err != nil {
		return a, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message)
	}
	a.filter = f
	if a.history, err = pod.ParseHistoryWant(q); err != nil {
		return a, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.Error())
	}
	if a.serves, e = parseServes(q); e != nil {
		return a, e
	}
	switch q.Get(wire.QueryObserve) {
	case "", "0":
	case "1":
		// Watching without presence needs the capability: a join that
		// may not be silent is refused, never made a visible one.
		if !a.who.Caps.Allows(wire.CapabilityObserve, nil) {
			return a, envelope.Errorf(wire.CodeForbidden, "observe=1 needs the %s capability: join without it to be present", wire.CapabilityObserve).Ruled(audit.RuleObserve)
		}
	default:
		return a, envelope.Errorf(wire.CodeInvalidFilter, "observe must be 0 or 1")
	}
	return a, nil
}

// parseServes reads serves= (docs/protocol.md section 1): what the
// participant answers requests of, shown in its identity. mcp is the one
// value there is; anything else is refused, so that a typo is not a
// participant nobody asks.
func parseServes(q url.Values) ([]string, *envelope.Error) {
	v := q.Get(wire.QueryServes)
	if v == "" {
		return nil, nil
	}
	if v != wire.ServesMCP {
		return nil, envelope.Errorf(wire.CodeInvalidFilter, "serves must be %s (an MCP server)", wire.ServesMCP)
	}
	return []string{wire.ServesMCP}, nil
}

// originAllowed applies the WebSocket library's origin rule before the
// upgrade, so that a refusal is the JSON answer of docs/protocol.md section 1
// and is counted: no Origin (an agent, not a browser) or the gateway's own
// host is allowed, and so is a host (or scheme://host) matching an
// --allowed-origins pattern.
func (g *Gateway) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, pattern := range g.originPatterns {
		target := u.Host
		if strings.Contains(pattern, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(pattern), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

func (g *Gateway) serveWS(w http.ResponseWriter, req *http.Request) {
	if !g.enter() {
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down: connect to another gateway, or later"))
		return
	}
	// Shutdown waits for this handler, then for its connection's reader.
	reading := false
	defer func() {
		if !reading {
			g.handlers.Done()
		}
	}()
	a, e := g.admit(w, req)
	if e != nil {
		g.refuseJoin(w, req, a.transport(), a.pod, a.who, e)
		return
	}
	if n := g.connCount.Add(1); n > int64(g.cfg.MaxConnections) {
		g.connCount.Add(-1)
		g.refuseJoin(w, req, a.transport(), a.pod, a.who, envelope.Errorf(wire.CodeOverCapacity, "the gateway has %d connections, the limit", g.cfg.MaxConnections))
		return
	}
	p, e := g.node.Enter(req.Context(), a.pod, func(p *pod.Pod) (bool, *envelope.Error) {
		return p.Reserve(a.who.ID, a.observe)
	})
	if e != nil {
		// No quorum, no room for the pod, the pod full, or the
		// participant banned (gateway/kick).
		g.connCount.Add(-1)
		g.refuseJoin(w, req, a.transport(), a.pod, a.who, e)
		return
	}
	p.SyncMembers()
	// The waits above may have been long (the other nodes' member lists,
	// a pod reading its past): a client that gave up meanwhile is not
	// joined, nor is one while this node cannot store (its join would be
	// stored late, after the joins the client made elsewhere since).
	if req.Context().Err() != nil || g.node.NoQuorum() {
		p.Unreserve()
		g.node.RemoveIdle(p)
		g.connCount.Add(-1)
		if req.Context().Err() == nil {
			g.refuse(w, envelope.Errorf(wire.CodeNoQuorum, "this gateway node cannot reach a quorum of the cluster's history stream: connect to another node, or try again later"))
		}
		return
	}
	hw := participant.SmallBuffers(w)
	conn, err := websocket.Accept(hw, req, &websocket.AcceptOptions{
		InsecureSkipVerify: true, // admit checked the origin, answering in JSON
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		p.Unreserve()
		g.node.RemoveIdle(p)
		g.connCount.Add(-1)
		return // Accept has answered the request
	}
	conn.SetReadLimit(g.cfg.readLimit())

	var r *participant.Participant
	id := a.who.ID
	r = participant.New(conn, hw.Conn(), id, a.pod, a.who.Caps, a.who.Credential, a.protocol, a.filter, participant.Options{
		SendQueue:      g.cfg.SendQueue,
		SendQueueBytes: int(g.cfg.SendQueueBytes),
		WriteTimeout:   g.cfg.WriteTimeout,
		OnCut: func(reason string) {
			n, bytes := r.Queued()
			g.log.Info("participant cut", "pod", a.pod, "participant", id, "reason", reason, "queued", n, "queued_bytes", bytes)
			g.metrics.cuts.WithLabelValues(reason).Inc()
			p.Cut(reason)
		},
		OnWrite: func(n int) { g.metrics.writes.Add(float64(n)) },
		Serves:  a.serves,
		Observe: a.observe,
	})
	if hook := hookBeforeJoin.Load(); hook != nil {
		(*hook)(a.pod, id)
	}
	p.Settle()
	// Counted before Join, which queues the welcome: a client that has
	// its welcome finds itself in mcpp_connections.
	g.metrics.connections.Inc()
	if refusal := p.Join(r, a.history); refusal != nil {
		g.metrics.connections.Dec()
		// Kicked with a ban while its upgrade was under way: it never
		// joined, and is told so in the close frame.
		g.metrics.refusals.WithLabelValues(string(refusal.Code)).Inc()
		g.auditJoin(req, a.transport(), a.pod, a.who, refusal)
		r.Close(participant.StatusKicked, refusal.Message)
		go func() {
			<-r.Done()
			_ = conn.CloseNow()
		}()
		g.node.RemoveIdle(p)
		g.connCount.Add(-1)
		return
	}
	g.auditJoin(req, a.transport(), a.pod, a.who, nil)
	buckets := g.node.Buckets.Acquire(limits.BucketKey(a.pod, id))
	if !g.accepting.Load() {
		// Shutdown closes the members it finds after turning accepting
		// off; this one joined after it looked.
		goAway(r)
	}

	// The connection is read by a goroutine of its own, and the HTTP
	// handler returns: the server's per-request state and its goroutine's
	// grown stack are freed for the life of the connection.
	reading = true
	go func() {
		defer g.handlers.Done()
		defer g.connCount.Add(-1)
		g.readLoop(p, r, buckets)
		// The library leaves a connection whose peer went away without a
		// closing handshake open, and an open one is never collected (it
		// refers to itself and has a finalizer): close it in every case.
		_ = conn.CloseNow()
		r.Finish()
		g.node.Buckets.Release(limits.BucketKey(a.pod, id), time.Now())
		p.Leave(r)
		g.node.RemoveIdle(p)
		g.metrics.connections.Dec()
	}()
}

// hookBeforeJoin, when set (by tests: export_test.go), runs between an
// upgrade's admission (Reserve) and its Join, so that a test can hold an
// upgrade there while the pod changes.
var hookBeforeJoin atomic.Pointer[func(pod, participant string)]

// readLoop reads the participant's messages until its connection ends,
// each into the pod (pod.Handle), the sender pausing while the pod's
// flow control says so (Throttle). The writers of the members its
// envelopes go to are woken once the messages it has read are handled,
// not after each: they are one burst (pod.Burst), which ends when no
// more is read.
func (g *Gateway) readLoop(p *pod.Pod, r *participant.Participant, buckets *limits.Buckets) {
	from := &pod.Sender{ID: r.ID, Protocol: r.Protocol, Conn: r, Buckets: buckets, Reply: pod.ReplyTo(r)}
	burst := new(pod.Burst)
	defer burst.Flush()
	r.ReadLoop(context.Background(), func(msg []byte, binary, more bool) {
		p.Handle(from, burst, msg, binary)
		if !more {
			burst.Flush()
		}
		p.Throttle(burst)
	})
}
