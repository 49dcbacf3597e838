package pod

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// Issue 39: the calls the gateway vouches for (docs/protocol.md section
// 11, "Calls the gateway vouches for"), tried by real participants on
// real connections, in two layouts: one node alone, and two nodes of a
// cluster on the memory broker with the requester on one and the
// recipient on the other, where every rule must hold as well.

// callLayout is where a test's participants are: callers join pod a,
// servers pod b (the same pod in the layout of one node).
type callLayout struct {
	a, b *Pod
	join func(p *Pod, id string, o joinOpts) *member
}

// eachLayout runs test in both layouts; tune (nil: none) tunes every
// node's configuration.
func eachLayout(t *testing.T, tune func(*Config), test func(t *testing.T, l callLayout)) {
	t.Run("one node", func(t *testing.T) {
		n, _ := testNode(t, 100, tune)
		p := openPod(t, n, "lab")
		test(t, callLayout{a: p, b: p, join: func(p *Pod, id string, o joinOpts) *member { return join(t, p, id, o) }})
	})
	t.Run("two nodes", func(t *testing.T) {
		c := newTestCluster(t, 2, tune)
		l := callLayout{a: c.open(c.nodes[0], "lab"), b: c.open(c.nodes[1], "lab"), join: c.join}
		test(t, l)
	})
}

// present waits until every pod of the layout lists ids as its
// participants, wherever they joined.
func (l callLayout) present(t *testing.T, ids ...string) {
	t.Helper()
	for _, p := range []*Pod{l.a, l.b} {
		waitFor(t, "every node to know "+p.Name+"'s participants", func() bool {
			have := identityIDs(p.Participants())
			for _, id := range ids {
				if !slices.Contains(have, id) {
					return false
				}
			}
			return true
		})
	}
}

// counted sums what of's counts on the layout's nodes.
func (l callLayout) counted(of func(*Node) float64) float64 {
	if l.a.node == l.b.node {
		return of(l.a.node)
	}
	return of(l.a.node) + of(l.b.node)
}

// rpc is a JSON-RPC request's payload.
func rpc(id any, method string, params map[string]any) map[string]any {
	pl := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != nil {
		pl["id"] = id
	}
	if params != nil {
		pl["params"] = params
	}
	return pl
}

// toolCall is an mcp/request of tools/call of tool, JSON-RPC id rpcID,
// envelope id id, to one recipient.
func toolCall(id, to string, rpcID any, tool string) map[string]any {
	return map[string]any{"id": id, "kind": wire.KindMCPRequest, "to": []string{to},
		"payload": rpc(rpcID, "tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})}
}

// answer is an mcp/response of id, correlated to the request request.
func answer(id, request string, rpcID any) map[string]any {
	return map[string]any{"id": id, "kind": wire.KindMCPResponse, "correlation_id": request,
		"payload": map[string]any{"jsonrpc": "2.0", "id": rpcID, "result": map[string]any{"content": []any{}}}}
}

// cancel is a notifications/cancelled of the request whose JSON-RPC id is
// rpcID, to its recipient.
func cancel(id, to string, rpcID any) map[string]any {
	return map[string]any{"id": id, "kind": wire.KindMCPRequest, "to": []string{to},
		"payload": rpc(nil, cancelled, map[string]any{"requestId": rpcID})}
}

// refusal is the code of the system/error the member is told for its
// envelope id, skipping what it receives before it but presence.
func (m *member) refusal(id string) wire.Code {
	m.t.Helper()
	for {
		v := m.nextEnv()
		if v["kind"] != wire.KindError {
			continue
		}
		if v["correlation_id"] != id {
			m.t.Fatalf("%s: an error for %v, want one for %s: %v", m.id, v["correlation_id"], id, v)
		}
		return wire.Code(v["payload"].(map[string]any)["error"].(string))
	}
}

// refused fails unless the member's envelope id was refused with want.
func (m *member) refused(id string, want wire.Code) {
	m.t.Helper()
	if got := m.refusal(id); got != want {
		m.t.Fatalf("%s's %s: refused %q, want %q", m.id, id, got, want)
	}
}

// nextOfKind is the next envelope of kind the member receives, failing on
// any other but the gateway's system/* messages, which it skips.
func (m *member) nextOfKind(kind string) map[string]any {
	m.t.Helper()
	for {
		v := m.nextEnv()
		if v["kind"] == kind {
			return v
		}
		if k, _ := v["kind"].(string); strings.HasPrefix(k, "system/") {
			continue
		}
		m.t.Fatalf("%s: received %v, want a %s", m.id, v, kind)
	}
}

// onlyUntil reads the member's envelopes until the chat end and fails on
// any other but the gateway's, so that what it must never receive is
// seen not to come before end, which was sent after it.
func (m *member) onlyUntil(end string) {
	m.t.Helper()
	for {
		v := m.nextEnv()
		if v["id"] == end {
			return
		}
		if v["from"] != wire.GatewayID {
			m.t.Fatalf("%s: received %v before %s, want nothing", m.id, v, end)
		}
	}
}

// gatewayAnswer checks that v is the gateway's mcp/response for the
// recipient to the requester's request (rpcID), in JSON-RPC error code
// with data.reason reason, and returns its data.
func gatewayAnswer(t *testing.T, v map[string]any, requester, request string, rpcID any, code int, reason string) map[string]any {
	t.Helper()
	pl, _ := v["payload"].(map[string]any)
	rpcErr, _ := pl["error"].(map[string]any)
	data, _ := rpcErr["data"].(map[string]any)
	if v["kind"] != wire.KindMCPResponse || v["from"] != wire.GatewayID || v["correlation_id"] != request ||
		!slices.Equal(toList(v), []string{requester}) || pl["id"] != rpcID || rpcErr["code"] != float64(code) || data["reason"] != reason {
		t.Fatalf("%s got %v, want the gateway's mcp/response to %s, JSON-RPC id %v, error %d %s", requester, v, request, rpcID, code, reason)
	}
	return data
}

func toList(v map[string]any) []string {
	var out []string
	for _, x := range v["to"].([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestCallAnsweredByItsRecipient: an mcp/request reaches its one
// recipient, whose mcp/response, correlated to it, reaches the requester
// with to filled in; the answer is the request's only one: a second
// answer, an answer to a request never made, an answer from another than
// the recipient (who would answer for it) are refused no_pending_request
// and reach nobody; an answer addressed to another than the requester is
// invalid_recipient; a request that names two recipients is
// invalid_recipient.
func TestCallAnsweredByItsRecipient(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		alice := l.join(l.a, "alice", joinOpts{})
		mallory := l.join(l.a, "mallory", joinOpts{})
		l.present(t, "files", "alice", "mallory")

		alice.send(toolCall("c1", "files", 7, "echo"))
		req := files.nextOfKind(wire.KindMCPRequest)
		if req["id"] != "c1" || req["from"] != "alice" || req["payload"].(map[string]any)["id"] != float64(7) {
			t.Fatalf("files received %v, want alice's c1", req)
		}

		// Another answers first, as if it were files: refused, and alice
		// does not receive it.
		mallory.send(answer("forged", "c1", 7))
		mallory.refused("forged", wire.CodeNoPendingRequest)
		files.send(map[string]any{"id": "astray", "kind": wire.KindMCPResponse, "correlation_id": "c1", "to": []string{"mallory"},
			"payload": map[string]any{"jsonrpc": "2.0", "id": 7, "result": map[string]any{}}})
		files.refused("astray", wire.CodeInvalidRecipient)

		files.send(answer("a1", "c1", 7))
		got := alice.nextOfKind(wire.KindMCPResponse)
		if got["id"] != "a1" || got["from"] != "files" || got["correlation_id"] != "c1" || !slices.Equal(toList(got), []string{"alice"}) ||
			got["payload"].(map[string]any)["id"] != float64(7) {
			t.Fatalf("alice received %v, want files' answer a1 to c1, to [alice]", got)
		}

		files.send(answer("a2", "c1", 7))
		files.refused("a2", wire.CodeNoPendingRequest)
		files.send(answer("a3", "never-made", 1))
		files.refused("a3", wire.CodeNoPendingRequest)
		files.send(chat("end", 0))
		alice.onlyUntil("end")

		alice.send(map[string]any{"id": "c2", "kind": wire.KindMCPRequest, "to": []string{"files", "mallory"}, "payload": rpc(8, "tools/list", nil)})
		alice.refused("c2", wire.CodeInvalidRecipient)
		if late := l.counted(func(n *Node) float64 { return counted(n.Metrics.Calls.Late) }); late != 3 {
			t.Fatalf("%v answers counted late, want the 3 refused no_pending_request", late)
		}
	})
}

// TestCallRecipientLeft: a recipient that leaves before it answers is
// answered for by the gateway (-32000, recipient_left, in the request's
// context), once, and its answer afterwards is no answer.
func TestCallRecipientLeft(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		bob := l.join(l.b, "bob", joinOpts{})
		alice := l.join(l.a, "alice", joinOpts{})
		l.present(t, "files", "bob", "alice")

		call := toolCall("c1", "files", 7, "slow")
		call["context"] = "task-1"
		alice.send(call)
		files.nextOfKind(wire.KindMCPRequest)
		l.b.Leave(files.r)
		got := alice.nextOfKind(wire.KindMCPResponse)
		data := gatewayAnswer(t, got, "alice", "c1", float64(7), wire.RPCConnectionClosed, wire.MCPReasonRecipientLeft)
		if data["recipient"] != "files" {
			t.Fatalf("the gateway's answer names recipient %v, want files", data["recipient"])
		}
		if ctx, _ := got["context"].(map[string]any); ctx["id"] != "task-1" {
			t.Fatalf("the gateway answered in context %v, want the request's task-1", got["context"])
		}
		if n := counted(l.a.node.Metrics.Calls.GatewayAnswers.WithLabelValues(wire.MCPReasonRecipientLeft)); n != 1 {
			t.Fatalf("the node that accepted the call answered for its recipient %v times, want once", n)
		}
		bob.send(chat("end", 0))
		alice.onlyUntil("end")
	})
}

// TestCallTimeout: a recipient that does not answer within
// --mcp-request-timeout is answered for by the gateway (-32001, timeout,
// data.timeout_ms), and its answer afterwards is refused
// no_pending_request and reaches nobody.
func TestCallTimeout(t *testing.T) {
	short := func(c *Config) { c.MCPRequestTimeout = 100 * time.Millisecond }
	eachLayout(t, short, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		alice := l.join(l.a, "alice", joinOpts{})
		l.present(t, "files", "alice")

		alice.send(toolCall("c1", "files", 7, "slow"))
		files.nextOfKind(wire.KindMCPRequest)
		data := gatewayAnswer(t, alice.nextOfKind(wire.KindMCPResponse), "alice", "c1", float64(7), wire.RPCRequestTimeout, wire.MCPReasonTimeout)
		if data["timeout_ms"] != float64(100) || data["recipient"] != "files" {
			t.Fatalf("the gateway's timeout answer: data %v", data)
		}
		// files learns of the answer as every member of routing all: after
		// it, its own answer is late.
		files.nextOfKind(wire.KindMCPResponse)
		files.send(answer("a1", "c1", 7))
		files.refused("a1", wire.CodeNoPendingRequest)
		files.send(chat("end", 0))
		alice.onlyUntil("end")
	})
}

// TestCallRecipientAbsent: a request to nobody in the pod, on any node,
// is answered at once by the gateway (-32000, recipient_absent).
func TestCallRecipientAbsent(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		alice := l.join(l.a, "alice", joinOpts{})
		l.present(t, "files", "alice")

		alice.send(toolCall("c1", "nobody", "r-1", "echo"))
		got := alice.nextOfKind(wire.KindMCPResponse)
		data := gatewayAnswer(t, got, "alice", "c1", "r-1", wire.RPCConnectionClosed, wire.MCPReasonRecipientAbsent)
		if data["recipient"] != "nobody" {
			t.Fatalf("the gateway's answer names recipient %v", data["recipient"])
		}
		// The call is over: nobody's answer, had it one, is late.
		files.send(answer("a1", "c1", "r-1"))
		files.refused("a1", wire.CodeNoPendingRequest)
	})
}

// TestCallCancelled: notifications/cancelled from the requester to the
// recipient, naming the JSON-RPC id of its call in flight, releases the
// call on every node: it reaches the recipient, whose answer afterwards
// is refused no_pending_request, and the requester's bound is free again.
// Cancelling what is not one's own call in flight (another's, one
// cancelled already, another id, the same id written as another JSON
// value) is no_pending_request; without params.requestId it is
// invalid_envelope.
func TestCallCancelled(t *testing.T) {
	one := func(c *Config) { c.MaxMCPRequestsPerParticipant = 1 }
	eachLayout(t, one, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		alice := l.join(l.a, "alice", joinOpts{})
		mallory := l.join(l.a, "mallory", joinOpts{})
		l.present(t, "files", "alice", "mallory")

		alice.send(toolCall("c1", "files", 7, "slow"))
		files.nextOfKind(wire.KindMCPRequest)
		alice.send(toolCall("c2", "files", 8, "slow"))
		alice.refused("c2", wire.CodeRequestLimitExceeded)

		mallory.send(cancel("x1", "files", 7))
		mallory.refused("x1", wire.CodeNoPendingRequest)
		alice.send(cancel("x2", "files", "7"))
		alice.refused("x2", wire.CodeNoPendingRequest)
		alice.send(cancel("x3", "files", 9))
		alice.refused("x3", wire.CodeNoPendingRequest)
		alice.send(map[string]any{"id": "x4", "kind": wire.KindMCPRequest, "to": []string{"files"}, "payload": rpc(nil, cancelled, map[string]any{})})
		alice.refused("x4", wire.CodeInvalidEnvelope)

		alice.send(cancel("x5", "files", 7))
		got := files.nextOfKind(wire.KindMCPRequest)
		if got["id"] != "x5" {
			t.Fatalf("files received %v, want alice's cancellation x5", got)
		}
		files.send(answer("a1", "c1", 7))
		files.refused("a1", wire.CodeNoPendingRequest)
		alice.send(cancel("x6", "files", 7))
		alice.refused("x6", wire.CodeNoPendingRequest)

		alice.send(toolCall("c3", "files", 9, "slow"))
		if got := files.nextOfKind(wire.KindMCPRequest); got["id"] != "c3" {
			t.Fatalf("files received %v, want c3: the cancelled call no longer counts against alice's bound", got)
		}
		files.send(chat("end", 0))
		alice.onlyUntil("end")
	})
}

// TestCallQuestions: a server asks a question of its caller only within a
// call in flight, from the call's recipient to its requester, correlated
// to it (invalid_recipient otherwise), and the caller's answer to the
// question reaches the server.
func TestCallQuestions(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		alice := l.join(l.a, "alice", joinOpts{})
		bob := l.join(l.a, "bob", joinOpts{query: "routing=directed"})
		l.present(t, "files", "alice", "bob")

		alice.send(toolCall("c1", "files", 7, "ask"))
		files.nextOfKind(wire.KindMCPRequest)
		question := func(id, to, call string) map[string]any {
			return map[string]any{"id": id, "kind": wire.KindMCPRequest, "to": []string{to}, "correlation_id": call,
				"payload": rpc(1, "elicitation/create", map[string]any{"message": "sure?"})}
		}
		files.send(question("q-bob", "bob", "c1"))
		files.refused("q-bob", wire.CodeInvalidRecipient)
		files.send(question("q-none", "alice", "c-none"))
		files.refused("q-none", wire.CodeInvalidRecipient)
		files.send(question("q1", "alice", "c1"))
		if got := alice.nextOfKind(wire.KindMCPRequest); got["id"] != "q1" || got["correlation_id"] != "c1" {
			t.Fatalf("alice received %v, want files' question q1 about c1", got)
		}
		alice.send(answer("qa1", "q1", 1))
		if got := files.nextOfKind(wire.KindMCPResponse); got["id"] != "qa1" {
			t.Fatalf("files received %v, want alice's answer to its question", got)
		}
		files.send(chat("end", 0))
		bob.onlyUntil("end")
	})
}
