package gateway

import (
	"context"
	"net/http"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/gateway/mcpendpoint"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// The MCP endpoint at /mcp is package mcpendpoint's. What it takes of the
// gateway is here: who a request is (the checks of /ws), the one way to
// find a pod and join it, and what it gives back when its member leaves.

// newMCPEndpoint builds the /mcp handler on the gateway's node.
func (g *Gateway) newMCPEndpoint() *mcpendpoint.Endpoint {
	return mcpendpoint.New(mcpendpoint.Gateway{
		Node:                g.node,
		SessionTimeout:      g.cfg.MCPSessionTimeout,
		LocalhostProtection: g.verifier == nil,
		Version:             Version(),
		NodeID:              g.nodeID,
		Tracer:              g.tracer(),
		Log:                 g.log,
		Admit:               g.admitMCP,
		Refuse: func(w http.ResponseWriter, r *http.Request, a mcpendpoint.Admission, e *envelope.Error) {
			g.refuseJoin(w, r, audit.TransportMCP, a.Pod, a.Who, e)
		},
		Join: g.joinMCP,
		Left: g.leftMCP,
	})
}

// admitMCP checks a request to /mcp as /ws checks an upgrade: the gateway
// is accepting, the origin is allowed, history is on (the endpoint reads
// it), the pod is named well, the token is good and the filter reads.
func (g *Gateway) admitMCP(w http.ResponseWriter, r *http.Request) (mcpendpoint.Admission, bool) {
	if !g.accepting.Load() {
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "the gateway is shutting down"))
		return mcpendpoint.Admission{}, false
	}
	if !g.originAllowed(r) {
		g.refuseJoin(w, r, audit.TransportMCP, r.URL.Query().Get("pod"), nobody, envelope.Errorf(wire.CodeForbidden,
			"origin %q may not connect (see --allowed-origins)", r.Header.Get("Origin")).Ruled(audit.RuleOrigin))
		return mcpendpoint.Admission{}, false
	}
	if !g.cfg.historyOn() {
		g.refuse(w, envelope.Errorf(wire.CodeOverCapacity,
			"the MCP endpoint reads the pod's history, which this gateway does not keep (--history 0)"))
		return mcpendpoint.Admission{}, false
	}
	q := r.URL.Query()
	name := q.Get("pod")
	if !envelope.ValidPodName(name) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "pod must be 1 to 64 characters of [A-Za-z0-9._-]: /mcp?pod=NAME"))
		return mcpendpoint.Admission{}, false
	}
	who, refusal := g.authenticate(w, r, name, false)
	if refusal != nil {
		g.refuseJoin(w, r, audit.TransportMCP, name, who, refusal)
		return mcpendpoint.Admission{}, false
	}
	f, err := filter.FromQuery(q)
	if err != nil {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidFilter, "%s", err.(*filter.Error).Message))
		return mcpendpoint.Admission{}, false
	}
	return mcpendpoint.Admission{Pod: name, Who: who, Filter: f}, true
}

// joinMCP is the endpoint's Join: a connection of --max-connections, the
// guest joined to the pod (Node.Enter, the one way in), the join in the
// audit trail.
func (g *Gateway) joinMCP(ctx context.Context, r *http.Request, a mcpendpoint.Admission, guest pod.Guest) (*pod.Pod, uint64, *envelope.Error) {
	if n := g.connCount.Add(1); n > int64(g.cfg.MaxConnections) {
		g.connCount.Add(-1)
		return nil, 0, envelope.Errorf(wire.CodeOverCapacity, "the gateway has %d connections, the limit", g.cfg.MaxConnections)
	}
	var cursor uint64
	p, refusal := g.node.Enter(ctx, a.Pod, func(p *pod.Pod) (bool, *envelope.Error) {
		p.SyncMembers()
		p.Settle()
		dead, refusal, c := p.JoinGuest(guest)
		cursor = c
		return dead, refusal
	})
	if refusal != nil {
		// The pod is full, or the participant is banned (gateway/kick).
		g.connCount.Add(-1)
		return nil, 0, refusal
	}
	g.auditJoin(r, audit.TransportMCP, a.Pod, a.Who, nil)
	return p, cursor, nil
}

// leftMCP is the endpoint's Left: the member's connection back, and its
// pod removed when idle (at shutdown the gateway closes every pod itself).
func (g *Gateway) leftMCP(p *pod.Pod, shutdown bool) {
	if !shutdown {
		g.node.RemoveIdle(p)
	}
	g.connCount.Add(-1)
}
