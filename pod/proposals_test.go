package pod

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/wire"
)

// Issue 39: proposals and their decisions (docs/protocol.md section 11,
// "Proposals"), tried by real participants on real connections, on one
// node and on two nodes of the memory broker (calls_test.go's layouts):
// the proposer and the approver on one node, the server on the other.

// writeCall is a proposed call written as a client may write it: white
// space, escapes and HTML that a re-encoding would change.
const writeCall = `{"jsonrpc":"2.0", "id":1,"method":"tools/call",  "params":{"name":"write_file","arguments":{"path":"/tmp/x","content":"<b>caf\u00e9</b> & more"}}}`

// proposing is an mcp/proposal of call (written as it is) to one
// recipient.
func proposing(id, to, call string) string {
	return `{"id":"` + id + `","kind":"mcp/proposal","to":["` + to + `"],"payload":` + call + `}`
}

// approval is a gateway/approve of proposal with digest (and scope, when
// not "").
func approval(id, proposal, digest, scope string) map[string]any {
	pl := map[string]any{"proposal": proposal, "digest": digest}
	if scope != "" {
		pl["scope"] = scope
	}
	return map[string]any{"id": id, "kind": wire.RequestApprove, "payload": pl}
}

// decision is an mcp/reject or mcp/withdraw of proposal.
func decision(id, kind, proposal, reason string) map[string]any {
	return map[string]any{"id": id, "kind": kind, "correlation_id": proposal, "payload": map[string]any{"reason": reason}}
}

// event is the next system/proposal event of proposal the member
// receives; it fails unless its state is state.
func (m *member) event(proposal, state string) map[string]any {
	m.t.Helper()
	for {
		v := m.nextEnv()
		if v["kind"] != wire.KindProposal || v["correlation_id"] != proposal {
			continue
		}
		pl := v["payload"].(map[string]any)
		if pl["state"] != state {
			m.t.Fatalf("%s: proposal %s is %v, want %s: %v", m.id, proposal, pl["state"], state, pl)
		}
		return pl
	}
}

// answerTo is the member's answer (a system/* kind) to its request id.
func (m *member) answerTo(id, kind string) map[string]any {
	m.t.Helper()
	for {
		v := m.nextEnv()
		if v["correlation_id"] != id {
			continue
		}
		if v["kind"] != kind {
			m.t.Fatalf("%s: %s was answered %v, want %s", m.id, id, v, kind)
		}
		return v["payload"].(map[string]any)
	}
}

// listed is the proposal id as gateway/proposals lists it to m (state
// all), or nil.
func (m *member) listed(id string) map[string]any {
	m.t.Helper()
	req := "list-" + time.Now().Format("150405.000000000")
	m.send(map[string]any{"id": req, "kind": wire.RequestProposals, "payload": map[string]any{"state": "all"}})
	for _, x := range m.answerTo(req, wire.KindProposals)["proposals"].([]any) {
		if info := x.(map[string]any); info["id"] == id {
			return info
		}
	}
	return nil
}

// rawNext is the next message of kind ("": any) the member's connection
// brings, as the gateway wrote it, for a member joined with noRead.
func rawNext(t *testing.T, m *member, kind string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		_, b, err := m.conn.Read(ctx)
		if err != nil {
			t.Fatalf("%s: no %s: %v", m.id, kind, err)
		}
		if kind == "" || gjson.GetBytes(b, "kind").Str == kind {
			return b
		}
	}
}

// TestProposalApproved: a proposal is pending, with the digest of its
// bytes as sent, to its proposer and who may approve it, and listed so;
// its proposer, who may not make the call, cannot approve it
// (capability_violation); an approval of another digest is
// proposal_changed and releases nothing; the approval releases the call
// as the proposer's mcp/request, its payload the proposal's bytes
// exactly, naming its approver, whose answer goes to the proposer; a
// second approval is proposal_not_pending.
func TestProposalApproved(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}, noRead: true})
		boss := l.join(l.a, "boss", joinOpts{})
		agent := l.join(l.a, "agent", joinOpts{caps: wire.Kinds("mcp/proposal")})
		l.present(t, "files", "boss", "agent")
		digest := wire.ProposalDigest([]byte(writeCall))

		agent.sendRaw(proposing("p1", "files", writeCall))
		for _, m := range []*member{agent, boss} {
			if ev := m.event("p1", wire.ProposalPending); ev["digest"] != digest || ev["proposer"] != "agent" || ev["to"] != "files" {
				t.Fatalf("%s: the pending event %v, want digest %s of the bytes sent", m.id, ev, digest)
			}
		}
		if info := boss.listed("p1"); info == nil || info["state"] != wire.ProposalPending || info["digest"] != digest {
			t.Fatalf("gateway/proposals lists p1 as %v", info)
		}

		agent.send(approval("ap0", "p1", digest, ""))
		agent.refused("ap0", wire.CodeCapabilityViolation)
		boss.send(approval("ap1", "p1", wire.ProposalDigest([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"}}`)), ""))
		boss.refused("ap1", wire.CodeProposalChanged)
		boss.send(approval("ap2", "p1", "", ""))
		boss.refused("ap2", wire.CodeInvalidEnvelope)
		if info := boss.listed("p1"); info["state"] != wire.ProposalPending {
			t.Fatalf("after refused approvals, p1 is %v", info["state"])
		}

		boss.send(approval("ap3", "p1", digest, ""))
		approved := boss.answerTo("ap3", wire.KindApprove)
		if approved["state"] != wire.ProposalApproved || approved["by"] != "boss" || approved["scope"] != wire.ScopeOnce {
			t.Fatalf("the approval's answer: %v", approved)
		}
		raw := rawNext(t, files, wire.KindMCPRequest)
		r := gjson.ParseBytes(raw)
		if r.Get("payload").Raw != writeCall {
			t.Fatalf("the released call's payload:\n%s\nwant the proposal's bytes exactly:\n%s", r.Get("payload").Raw, writeCall)
		}
		if r.Get("id").Str != approved["request"] || r.Get("from").Str != "agent" || r.Get("correlation_id").Str != "p1" ||
			r.Get("approval.proposal").Str != "p1" || r.Get("approval.by").Str != "boss" {
			t.Fatalf("the released call: %s", raw)
		}
		if ev := agent.event("p1", wire.ProposalApproved); ev["request"] != approved["request"] {
			t.Fatalf("the proposer was told %v", ev)
		}

		files.send(answer("a1", r.Get("id").Str, 1))
		if got := agent.nextOfKind(wire.KindMCPResponse); got["correlation_id"] != approved["request"] || got["from"] != "files" {
			t.Fatalf("the proposer received %v, want files' answer to the released call", got)
		}
		boss.send(approval("ap4", "p1", digest, ""))
		boss.refused("ap4", wire.CodeProposalNotPending)
		// The refused approvals released nothing: files received no
		// other call before end, sent after them all.
		boss.send(chat("end", 0))
		for {
			b := rawNext(t, files, "")
			if gjson.GetBytes(b, "id").Str == "end" {
				break
			}
			if gjson.GetBytes(b, "kind").Str == wire.KindMCPRequest {
				t.Fatalf("files received a second call: %s", b)
			}
		}
	})
}

// TestProposalRejectedAndWithdrawn: whoever may make the call rejects a
// proposal, and only they (capability_violation); only its proposer
// withdraws one (capability_violation); a decision on a proposal that
// ended or was never made is proposal_not_pending; a proposal's id is
// new to the pod (duplicate_id), an ended one's too.
func TestProposalRejectedAndWithdrawn(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		boss := l.join(l.a, "boss", joinOpts{})
		agent := l.join(l.a, "agent", joinOpts{caps: wire.Kinds("mcp/proposal")})
		l.present(t, "files", "boss", "agent")

		agent.sendRaw(proposing("p1", "files", writeCall))
		agent.event("p1", wire.ProposalPending)
		agent.send(decision("r0", wire.KindMCPReject, "p1", "mine"))
		agent.refused("r0", wire.CodeCapabilityViolation)
		boss.send(decision("r1", wire.KindMCPReject, "p1", "unsafe"))
		if ev := agent.event("p1", wire.ProposalRejected); ev["by"] != "boss" || ev["reason"] != "unsafe" {
			t.Fatalf("the rejection: %v", ev)
		}
		agent.send(decision("w0", wire.KindMCPWithdraw, "p1", ""))
		agent.refused("w0", wire.CodeProposalNotPending)
		boss.send(approval("ap0", "p1", wire.ProposalDigest([]byte(writeCall)), ""))
		boss.refused("ap0", wire.CodeProposalNotPending)
		agent.sendRaw(proposing("p1", "files", writeCall))
		agent.refused("p1", wire.CodeDuplicateID)

		agent.sendRaw(proposing("p2", "files", writeCall))
		agent.event("p2", wire.ProposalPending)
		boss.send(decision("w1", wire.KindMCPWithdraw, "p2", ""))
		boss.refused("w1", wire.CodeCapabilityViolation)
		agent.send(decision("w2", wire.KindMCPWithdraw, "p2", "changed my mind"))
		if ev := agent.event("p2", wire.ProposalWithdrawn); ev["by"] != "agent" {
			t.Fatalf("the withdrawal: %v", ev)
		}
		boss.send(decision("r2", wire.KindMCPReject, "never-made", ""))
		boss.refused("r2", wire.CodeProposalNotPending)

		if info := boss.listed("p1"); info["state"] != wire.ProposalRejected {
			t.Fatalf("p1 is listed %v", info)
		}
		if info := boss.listed("p2"); info["state"] != wire.ProposalWithdrawn {
			t.Fatalf("p2 is listed %v", info)
		}
	})
}

// TestProposalFulfilled: MEW's way, an mcp/request correlated to a
// pending proposal, from one who may make the call, fulfils it when it
// makes the same call (the same method and params as JSON values, any
// JSON-RPC id); another call leaves it pending. The fulfiller's call is
// its own: files' answer goes to it.
func TestProposalFulfilled(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		boss := l.join(l.a, "boss", joinOpts{})
		agent := l.join(l.a, "agent", joinOpts{caps: wire.Kinds("mcp/proposal")})
		l.present(t, "files", "boss", "agent")

		agent.sendRaw(proposing("p1", "files", writeCall))
		agent.event("p1", wire.ProposalPending)
		other := toolCall("f1", "files", 50, "write_file")
		other["correlation_id"] = "p1"
		boss.send(other) // the same tool, other arguments: a call of its own
		files.nextOfKind(wire.KindMCPProposal)
		if got := files.nextOfKind(wire.KindMCPRequest); got["id"] != "f1" {
			t.Fatalf("files received %v, want boss's f1", got)
		}
		if info := boss.listed("p1"); info["state"] != wire.ProposalPending {
			t.Fatalf("after another call, p1 is %v", info["state"])
		}

		same := `{"params":{"arguments":{"content":"<b>café</b> & more","path":"/tmp/x"},"name":"write_file"},"method":"tools/call","jsonrpc":"2.0","id":"mine"}`
		boss.sendRaw(`{"id":"f2","kind":"mcp/request","to":["files"],"correlation_id":"p1","payload":` + same + `}`)
		if ev := agent.event("p1", wire.ProposalFulfilled); ev["by"] != "boss" || ev["request"] != "f2" {
			t.Fatalf("the fulfilment: %v", ev)
		}
		if got := files.nextOfKind(wire.KindMCPRequest); got["id"] != "f2" {
			t.Fatalf("files received %v, want boss's f2", got)
		}
		files.send(answer("a2", "f2", "mine"))
		if got := boss.nextOfKind(wire.KindMCPResponse); got["correlation_id"] != "f2" {
			t.Fatalf("boss received %v, want files' answer to its fulfilment", got)
		}
	})
}

// TestProposalAlwaysGrant: an approval with scope always grants the
// proposer that call from then on, its method and exact tool name on the
// proposal's recipient alone: the proposer calls that tool there
// directly, not another tool, not another spelling of it, not on another
// server; nobody else gains it. A tool name a pattern would read as more
// than itself is granted by no always approval (invalid_envelope), and
// the proposal stays pending.
func TestProposalAlwaysGrant(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		l.join(l.b, "other", joinOpts{serves: []string{wire.ServesMCP}})
		boss := l.join(l.a, "boss", joinOpts{})
		agent := l.join(l.a, "agent", joinOpts{caps: wire.Kinds("mcp/proposal")})
		bob := l.join(l.a, "bob", joinOpts{caps: wire.Kinds("mcp/proposal")})
		l.present(t, "files", "other", "boss", "agent", "bob")

		echo := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`
		agent.sendRaw(proposing("p1", "files", echo))
		agent.event("p1", wire.ProposalPending)
		files.nextOfKind(wire.KindMCPProposal) // relayed to its recipient, which learns what is proposed
		agent.send(toolCall("c0", "files", 2, "echo"))
		agent.refused("c0", wire.CodeCapabilityViolation)

		boss.send(approval("ap1", "p1", wire.ProposalDigest([]byte(echo)), wire.ScopeAlways))
		approved := boss.answerTo("ap1", wire.KindApprove)
		if approved["scope"] != wire.ScopeAlways || approved["grant_id"] == nil {
			t.Fatalf("the always approval's answer: %v", approved)
		}
		// files watches with routing all: it sees the grant, then the
		// call released (section 11: the event, the grant, the call).
		grant := files.nextOfKind(wire.KindGrant)
		if pl := grant["payload"].(map[string]any); grant["id"] != approved["grant_id"] || grant["from"] != "boss" || pl["recipient"] != "agent" || pl["to"] != "files" ||
			jsonText(t, pl["capabilities"]) != `[{"kind":"mcp/request","payload":{"method":"tools/call","params":{"name":"echo"}}}]` {
			t.Fatalf("the always approval's grant: %v", grant)
		}
		if got := files.nextOfKind(wire.KindMCPRequest); got["id"] != approved["request"] {
			t.Fatalf("files received %v, want the released call", got)
		}

		// The grant is in force on the proposer's node once it is told of
		// it there (in a cluster, once its node applied it).
		if got := agent.nextOfKind(wire.KindGrant); got["id"] != approved["grant_id"] {
			t.Fatalf("agent was told of %v, want its grant", got)
		}
		agent.send(toolCall("c1", "files", 3, "echo"))
		if got := files.nextOfKind(wire.KindMCPRequest); got["id"] != "c1" || got["from"] != "agent" {
			t.Fatalf("files received %v, want agent's own call of echo, granted", got)
		}
		for id, tried := range map[string]map[string]any{
			"c2": toolCall("c2", "other", 4, "echo"),     // another server
			"c3": toolCall("c3", "files", 5, "echo2"),    // another tool
			"c4": toolCall("c4", "files", 6, "Echo"),     // another spelling
			"c5": toolCall("c5", "files", 7, "write_it"), // another tool again
		} {
			agent.send(tried)
			agent.refused(id, wire.CodeCapabilityViolation)
		}
		bob.send(toolCall("c6", "files", 8, "echo"))
		bob.refused("c6", wire.CodeCapabilityViolation)

		glob := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_*"}}`
		agent.sendRaw(proposing("p2", "files", glob))
		agent.event("p2", wire.ProposalPending)
		boss.send(approval("ap2", "p2", wire.ProposalDigest([]byte(glob)), wire.ScopeAlways))
		boss.refused("ap2", wire.CodeInvalidEnvelope)
		if info := boss.listed("p2"); info["state"] != wire.ProposalPending {
			t.Fatalf("after a refused always approval, p2 is %v", info["state"])
		}
		boss.send(approval("ap3", "p2", wire.ProposalDigest([]byte(glob)), wire.ScopeOnce))
		if a := boss.answerTo("ap3", wire.KindApprove); a["state"] != wire.ProposalApproved {
			t.Fatalf("approving p2 once: %v", a)
		}
		agent.send(toolCall("c7", "files", 10, "read_me"))
		agent.refused("c7", wire.CodeCapabilityViolation)
	})
}

// TestProposalWaitOnlyByProposer: the wait of an MCP host's proposal
// (Await, which proposal_wait uses) is handed the proposal's outcome,
// then the answer to the call its approval released, when its waiter is
// the proposer; another's wait on the same id is handed nothing.
func TestProposalWaitOnlyByProposer(t *testing.T) {
	eachLayout(t, nil, func(t *testing.T, l callLayout) {
		files := l.join(l.b, "files", joinOpts{serves: []string{wire.ServesMCP}})
		boss := l.join(l.a, "boss", joinOpts{})
		agent := l.join(l.a, "agent", joinOpts{caps: wire.Kinds("mcp/proposal")})
		l.present(t, "files", "boss", "agent")

		agent.sendRaw(proposing("p1", "files", writeCall))
		agent.event("p1", wire.ProposalPending)
		files.nextOfKind(wire.KindMCPProposal)
		mine, theirs := l.a.Await("p1", "agent"), l.a.Await("p1", "boss")
		defer l.a.Forget("p1", theirs)

		boss.send(approval("ap1", "p1", wire.ProposalDigest([]byte(writeCall)), ""))
		request := boss.answerTo("ap1", wire.KindApprove)["request"].(string)
		outcome := waited(t, mine)
		if gjson.GetBytes(outcome, "kind").Str != wire.KindProposal || gjson.GetBytes(outcome, "payload.state").Str != wire.ProposalApproved {
			t.Fatalf("the proposer's wait was handed %s, want p1's approval", outcome)
		}
		files.nextOfKind(wire.KindMCPRequest)
		files.send(answer("a1", request, 1))
		if got := waited(t, mine); gjson.GetBytes(got, "correlation_id").Str != request || gjson.GetBytes(got, "from").Str != "files" {
			t.Fatalf("the proposer's wait was handed %s, want files' answer to %s", got, request)
		}
		// Both were handed under the pod's lock, as the other's would
		// have been.
		select {
		case got := <-theirs:
			t.Fatalf("boss, who did not propose p1, was handed %s", got)
		default:
		}
	})
}

// jsonText is v as JSON.
func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waited is what a wait is handed, within 5 s.
func waited(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-ch:
		if !json.Valid(b) {
			t.Fatalf("a wait was handed %q", b)
		}
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("a wait was handed nothing within 5s")
	}
	return nil
}
