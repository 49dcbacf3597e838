package mcpendpoint

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/wire"
)

// The capabilities of the proposals' tests: agent may propose calls, not
// make them; boss may make them, and so decide on agent's proposals.
var (
	agentCaps = wire.Kinds("chat", wire.KindMCPProposal)
	bossCaps  = wire.Kinds("chat", wire.KindMCPRequest)
)

// proposedCall starts agent's call of files__echo with message, which
// becomes a proposal, and returns where its result comes.
func proposedCall(t *testing.T, agent *mcp.ClientSession, message string) <-chan *mcp.CallToolResult {
	out := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := agent.CallTool(t.Context(), &mcp.CallToolParams{Name: "files__echo", Arguments: map[string]any{"message": message}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "protocol error: " + err.Error()}}}
		}
		out <- res
	}()
	return out
}

// pendingProposal reads the pod as boss does (pod_read, waiting) until a
// pending proposal of agent's, and returns its event.
func pendingProposal(t *testing.T, boss *mcp.ClientSession) wire.ProposalEvent {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		res := call(t, boss, "pod_read", map[string]any{"wait_ms": 2000})
		if res.IsError {
			t.Fatalf("pod_read: %s", textOf(res))
		}
		var page struct {
			Envelopes []struct {
				Kind    string             `json:"kind"`
				Payload wire.ProposalEvent `json:"payload"`
			} `json:"envelopes"`
		}
		if err := json.Unmarshal([]byte(textOf(res)), &page); err != nil {
			t.Fatalf("pod_read answered %s: %v", textOf(res), err)
		}
		for _, env := range page.Envelopes {
			if env.Kind == wire.KindProposal && env.Payload.State == wire.ProposalPending && env.Payload.Proposer == "agent" {
				return env.Payload
			}
		}
	}
	t.Fatal("boss read no pending proposal of agent's within 15s")
	return wire.ProposalEvent{}
}

// resultWithin is the call's result, or a failure after 15s.
func resultWithin(t *testing.T, c <-chan *mcp.CallToolResult) *mcp.CallToolResult {
	t.Helper()
	select {
	case res := <-c:
		return res
	case <-time.After(15 * time.Second):
		t.Fatal("the proposed call did not return within 15s")
	}
	return nil
}

// TestProposedCallApproved: a host that may only propose a call, calling
// a server's tool, proposes it; the host allowed to make it sees it
// pending (pod_read, pod_proposals) and approves it with its digest; the
// server gets the call, and the proposer's call returns its result.
// Only the proposer may wait on the proposal.
func TestProposedCallApproved(t *testing.T) {
	tp := newTestPod(t)
	files := tp.toolServer("files", echoServer())
	boss := tp.host("boss", bossCaps, newestVersion)
	agent := tp.host("agent", agentCaps, newestVersion)
	serverToolsAre(t, agent, []string{"files__echo"})

	result := proposedCall(t, agent, "proposed")
	ev := pendingProposal(t, boss)
	if ev.To != "files" || !strings.HasPrefix(ev.Digest, "sha256:") {
		t.Fatalf("the pending proposal: %+v", ev)
	}
	res := call(t, boss, "pod_proposals", nil)
	var list wire.ProposalsAnswer
	if err := json.Unmarshal([]byte(textOf(res)), &list); err != nil || len(list.Proposals) != 1 ||
		list.Proposals[0].ID != ev.Proposal || list.Proposals[0].Digest != ev.Digest || list.Proposals[0].Proposer != "agent" {
		t.Fatalf("pod_proposals answered %s (%v)", textOf(res), err)
	}

	// Boss may not wait on it: it is agent's.
	res = call(t, boss, "proposal_wait", map[string]any{"proposal": ev.Proposal})
	if !res.IsError || !strings.Contains(textOf(res), `"error":"`+string(wire.CodeCapabilityViolation)+`"`) {
		t.Fatalf("boss's proposal_wait answered %v %s", res.IsError, textOf(res))
	}
	res = call(t, agent, "proposal_wait", map[string]any{"proposal": "no-such-proposal"})
	if !res.IsError || !strings.Contains(textOf(res), `"error":"`+string(wire.CodeProposalNotPending)+`"`) {
		t.Fatalf("proposal_wait of no proposal answered %v %s", res.IsError, textOf(res))
	}
	// A digest of another call is refused; the proposal stays pending.
	res = call(t, boss, "proposal_approve", map[string]any{"proposal": ev.Proposal, "digest": "sha256:" + strings.Repeat("0", 64)})
	if !res.IsError || !strings.Contains(textOf(res), `"error":"`+string(wire.CodeProposalChanged)+`"`) {
		t.Fatalf("an approval of another digest answered %v %s", res.IsError, textOf(res))
	}

	res = call(t, boss, "proposal_approve", map[string]any{"proposal": ev.Proposal, "digest": ev.Digest})
	var approved wire.ProposalEvent
	if res.IsError || json.Unmarshal([]byte(textOf(res)), &approved) != nil || approved.State != wire.ProposalApproved || approved.By != "boss" {
		t.Fatalf("proposal_approve answered %v %s", res.IsError, textOf(res))
	}
	env := files.nextCall(t)
	if args := env["payload"].(map[string]any)["params"].(map[string]any)["arguments"].(map[string]any); args["message"] != "proposed" {
		t.Fatalf("the server received %v", env)
	}
	if res := resultWithin(t, result); res.IsError || textOf(res) != "Echo: proposed" {
		t.Fatalf("agent's proposed call returned %v %q", res.IsError, textOf(res))
	}
}

// TestProposedCallRejected: a proposal rejected (boss's mcp/reject, sent
// with pod_send) ends the proposer's call with an error result that says
// who rejected it and why, and the server is never called. (The
// proposer speaks MCP with sessions here, the newest in
// TestProposedCallApproved.)
func TestProposedCallRejected(t *testing.T) {
	tp := newTestPod(t)
	files := tp.toolServer("files", echoServer())
	boss := tp.host("boss", bossCaps, newestVersion)
	agent := tp.host("agent", agentCaps, sessionsVersion)
	serverToolsAre(t, agent, []string{"files__echo"})

	result := proposedCall(t, agent, "rejected")
	ev := pendingProposal(t, boss)
	res := call(t, boss, "pod_send", map[string]any{"kind": wire.KindMCPReject, "correlation_id": ev.Proposal,
		"payload": map[string]any{"reason": "not today"}})
	if res.IsError {
		t.Fatalf("boss's mcp/reject: %s", textOf(res))
	}
	res = resultWithin(t, result)
	want := fmt.Sprintf("your call was proposed (proposal %s) and rejected by boss: not today", ev.Proposal)
	if !res.IsError || textOf(res) != want {
		t.Fatalf("agent's rejected call returned %v %q, want %q", res.IsError, textOf(res), want)
	}
	// A decision on it now is refused: it is no longer pending.
	res = call(t, boss, "proposal_approve", map[string]any{"proposal": ev.Proposal, "digest": ev.Digest})
	if !res.IsError || !strings.Contains(textOf(res), `"error":"`+string(wire.CodeProposalNotPending)+`"`) {
		t.Fatalf("an approval after the rejection answered %v %s", res.IsError, textOf(res))
	}
	// The proposer sees what became of it.
	res = call(t, agent, "proposal_wait", map[string]any{"proposal": ev.Proposal})
	if !res.IsError || !strings.Contains(textOf(res), "the proposal is rejected") {
		t.Fatalf("agent's proposal_wait after the rejection answered %v %s", res.IsError, textOf(res))
	}
	select {
	case env := <-files.calls:
		t.Fatalf("the server received the rejected call: %v", env)
	default:
	}
}
