package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// The viewer as a console (issue 30): a person signed in with a token
// watches a pod without presence, decides the proposals of an agent that
// may only propose, sends messages and kicks participants, where the
// token's capabilities allow; the gateway's answers, refusals included,
// show next to what they answer. A real pod: the gateway, mcpp bridge with
// the Go SDK test server (tools echo and pid), WebSocket participants, and
// the page in headless Chromium.

// consoleTokens: person may call tools, grant, watch without presence and
// kick; agent may chat and propose, nothing more; narrow may call the pid
// tool alone (so the page cannot tell which proposals it may approve) and
// watch; reader may not chat, call, kick or watch; probe watches the
// bridge come up.
func consoleTokens(t *testing.T) string {
	return harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "person-t", "participant": "person", "capabilities": ["chat", "mcp/request", "capability/grant", "gateway/observe", "gateway/kick"], "pods": ["*"]},
  {"token": "agent-t", "participant": "agent", "capabilities": ["chat", "mcp/proposal"], "pods": ["*"]},
  {"token": "tools-t", "participant": "tools", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["*"]},
  {"token": "probe-t", "participant": "probe", "capabilities": ["mcp/request", "gateway/observe"], "pods": ["*"]},
  {"token": "listener-t", "participant": "listener", "capabilities": ["chat", "test/*"], "pods": ["*"]},
  {"token": "rogue-t", "participant": "rogue", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "reader-t", "participant": "reader", "capabilities": ["test/*"], "pods": ["*"]},
  {"token": "narrow-t", "participant": "narrow", "capabilities": ["gateway/observe",
    {"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "pid"}}}], "pods": ["*"]}
]}`)
}

// proposeCall sends agent's proposal (envelope id id) of a call of tool
// with the arguments args (JSON text, sent as it is) to the bridge, and
// waits until the gateway holds it.
func proposeCall(t *testing.T, agent *harness.Client, id, tool, args string) {
	t.Helper()
	call := fmt.Sprintf(`{"jsonrpc": "2.0", "id": %q, "method": "tools/call", "params": {"name": %q, "arguments": %s}}`, id, tool, args)
	agent.Send(map[string]any{"id": id, "kind": "mcp/proposal", "to": []string{"tools"}, "payload": json.RawMessage(call)})
	proposalEvent(t, agent, id, wire.ProposalPending)
}

// consoleTab opens the viewer in a new tab of b and signs in with token.
func consoleTab(t *testing.T, b *harness.Browser, g *harness.Gateway, pod, token string) *harness.Browser {
	t.Helper()
	tab := b.Tab(t)
	tab.Open(g.URL + "/")
	tab.SubmitJoin(pod, "", token)
	tab.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	return tab
}

// jsPending tells whether the proposal id is in the pending list.
func jsPending(id string) string {
	return harness.JSPending + `().includes(` + harness.JS(id) + `)`
}

// jsCardHas tells whether a part of a proposal's card contains text.
func jsCardHas(id, part, text string) string {
	return `(` + harness.JSCardText(id, part) + ` ?? '').includes(` + harness.JS(text) + `)`
}

// jsNone tells whether the page holds no element sel matches.
func jsNone(sel string) string {
	return `document.querySelectorAll(` + harness.JS(sel) + `).length === 0`
}

// TestViewerConsole: the console's five cases share one gateway, one
// bridge and one Chromium, each in a tab of its own.
func TestViewerConsole(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = consoleTokens(t); c.History = 1000 })
	const pod = "console"
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "probe-t", Observe: true})
	startBridgeProc(t, g, probe, pod, "tools", []string{"--token", "tools-t"}, goServer(t))
	b := harness.NewBrowser(t, harness.BrowserOpts{})

	// A person approves a pending proposal, seen with its exact call; the
	// tool's answer to the proposer shows in the pod's envelopes; the
	// viewer, observing, was never announced to the pod.
	t.Run("approve", func(t *testing.T) {
		listener := g.DialToken(t, pod, "listener-t", true, "")
		agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
		tab := consoleTab(t, b, g, pod, "person-t")
		tab.WaitFor("the page to say it observes", harness.JSMode+` === 'observing'`, 5*time.Second)

		proposeCall(t, agent, "p-approve", "echo", `{"message": "approve me", "delay_ms": 0}`)
		tab.WaitFor("the pending proposal with its call", jsPending("p-approve")+
			` && `+harness.JSCardText("p-approve", ".p-proposer")+` === 'agent'`+
			` && `+harness.JSCardText("p-approve", ".p-to")+` === 'tools'`+
			` && `+harness.JSCardText("p-approve", ".p-method")+` === 'tools/call'`+
			` && `+harness.JSCardText("p-approve", ".p-tool")+` === 'echo'`+
			` && `+harness.JSCardText("p-approve", ".p-args")+` === `+harness.JS("{\n  \"message\": \"approve me\",\n  \"delay_ms\": 0\n}"), 10*time.Second)
		tab.Click("approve once", harness.ProposalPart("p-approve", ".approve-once"))

		approved := proposalEvent(t, agent, "p-approve", wire.ProposalApproved)
		if approved.Payload()["by"] != "person" || approved.Payload()["scope"] != nil && approved.Payload()["scope"] != wire.ScopeOnce {
			t.Fatalf("the approval the proposer was told of: %v", approved.Payload())
		}
		resp := answerTo(t, agent, approved.Payload()["request"].(string))
		if !strings.Contains(string(harness.MustJSON(t, resp["payload"])), "Echo: approve me") {
			t.Fatalf("the answer to the released call: %v", resp)
		}
		tab.WaitFor("the proposal ended, with the gateway's answer and the tool's", `!`+jsPending("p-approve")+
			` && `+jsCardHas("p-approve", ".p-outcome", "approved once by you: the call was released")+
			` && `+jsCardHas("p-approve", ".p-end", "approved by person")+
			` && `+jsCardHas("p-approve", ".p-answer", "answer from tools: Echo: approve me"), 10*time.Second)
		tab.WaitFor("the tool's answer and the proposal's end among the envelopes",
			harness.JSHasRow("Echo: approve me")+` && `+harness.JSHasRow("proposal p-approve approved: agent → tools, by person"), 10*time.Second)

		// Nobody was told the viewer came: no presence on a participant's
		// stream from its join to the sentinel, no place in a later welcome.
		late := g.DialToken(t, pod, "rogue-t", true, "")
		if ids := harness.IDsOf(late.Welcome.Payload()["participants"]); strings.Contains(strings.Join(ids, " "), "person") {
			t.Errorf("a welcome lists the observing viewer: %v", ids)
		}
		harness.Sentinel(listener, "approve-end", listener)
		for m := listener.Next(5 * time.Second); ; m = listener.Next(5 * time.Second) {
			if m == nil {
				t.Fatal("listener: no sentinel within 5s")
			}
			if m.Kind() == "test/sentinel" {
				break
			}
			if m.Kind() == "system/presence" && strings.Contains(string(harness.MustJSON(t, m)), `"person"`) {
				t.Errorf("listener was told of the observing viewer: %v", m)
			}
		}
	})

	// Approve always: the page says which grant it made, and the proposer
	// then makes the same call (another tool's arguments aside) itself.
	t.Run("approve always", func(t *testing.T) {
		agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
		tab := consoleTab(t, b, g, pod, "person-t")
		proposeCall(t, agent, "p-always", "echo", `{"message": "always"}`)
		tab.Click("approve always", harness.ProposalPart("p-always", ".approve-always"))
		approved := proposalEvent(t, agent, "p-always", wire.ProposalApproved)
		grant, _ := approved.Payload()["grant_id"].(string)
		if approved.Payload()["scope"] != wire.ScopeAlways || grant == "" {
			t.Fatalf("the approval the proposer was told of: %v", approved.Payload())
		}
		tab.WaitFor("the grant named next to the proposal", jsCardHas("p-always", ".p-outcome", "approved always by you")+
			` && `+jsCardHas("p-always", ".p-outcome", "grant "+grant+" lets agent make this call from now on"), 10*time.Second)
		agent.Send(map[string]any{"id": "direct-always", "kind": "mcp/request", "to": []string{"tools"},
			"payload": json.RawMessage(bridgetest.ToolCall(7, "echo", map[string]any{"message": "on my own"}))})
		if resp := answerTo(t, agent, "direct-always"); !strings.Contains(string(harness.MustJSON(t, resp["payload"])), "Echo: on my own") {
			t.Fatalf("the call granted always: %v", resp)
		}
	})

	// A person rejects a proposal with a reason; the proposer is told that
	// reason, and the page shows the end.
	t.Run("reject", func(t *testing.T) {
		agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
		tab := consoleTab(t, b, g, pod, "person-t")
		proposeCall(t, agent, "p-reject", "pid", `{}`)
		tab.WaitFor("the pending proposal", jsPending("p-reject")+` && `+harness.JSCardText("p-reject", ".p-tool")+` === 'pid'`, 10*time.Second)
		const reason = "not now: <b>the pid is private</b>"
		tab.Type("the reason", harness.ProposalPart("p-reject", ".reject-reason"), reason)
		tab.Click("reject", harness.ProposalPart("p-reject", ".reject"))

		rejected := proposalEvent(t, agent, "p-reject", wire.ProposalRejected)
		if p := rejected.Payload(); p["reason"] != reason || p["by"] != "person" {
			t.Fatalf("the rejection the proposer was told of: %v", p)
		}
		tab.WaitFor("the proposal ended as rejected", `!`+jsPending("p-reject")+
			` && `+jsCardHas("p-reject", ".p-outcome", "rejected by you: "+reason)+
			` && `+harness.JSHasRow("proposal p-reject rejected: agent → tools, by person: "+reason), 10*time.Second)
	})

	// A person sends a message into the main conversation, then into the
	// context selected in the tree; another participant receives both.
	t.Run("send", func(t *testing.T) {
		listener := g.DialToken(t, pod, "listener-t", true, "")
		tab := consoleTab(t, b, g, pod, "person-t")
		chatFromPerson := func() harness.Msg {
			t.Helper()
			for m := listener.Next(10 * time.Second); m != nil; m = listener.Next(10 * time.Second) {
				if m.Kind() == "chat" && m.Str("from") == "person" {
					return m
				}
			}
			t.Fatal("listener: no chat from person within 10s")
			return nil
		}

		tab.WaitFor("the box for the main conversation", `document.getElementById('send-label').textContent === 'Message to the main conversation' && !document.getElementById('send-text').disabled`, 5*time.Second)
		tab.Type("a message", "#send-text", "hello from the console")
		tab.Click("send", "#send-button")
		if m := chatFromPerson(); m.Payload()["text"] != "hello from the console" || m.ContextID() != "" {
			t.Fatalf("listener got %v, want the message in the main conversation", m)
		}
		tab.WaitFor("the message among the envelopes", harness.JSHasRow("hello from the console")+` && document.getElementById('send-note').textContent === 'sent'`, 10*time.Second)

		listener.Send(harness.TextEnv("chat", harness.ContextField("task-7", "task", ""), "task 7 opened"))
		tab.ClickItem("task-7")
		tab.WaitFor("the box for task-7", `document.getElementById('send-label').textContent === 'Message in task-7'`, 5*time.Second)
		tab.Type("a message in task-7", "#send-text", "on it, in the task")
		tab.Click("send", "#send-button")
		if m := chatFromPerson(); m.Payload()["text"] != "on it, in the task" || m.ContextID() != "task-7" {
			t.Fatalf("listener got %v, want the message in task-7", m)
		}
		tab.WaitFor("the message in task-7's envelopes", `document.getElementById('view-title').textContent === 'task-7' && `+harness.JSHasRow("on it, in the task"), 10*time.Second)
	})

	// A person kicks a participant from the participant list, with a
	// reason: its connection is closed (4410) and the page says so.
	t.Run("kick", func(t *testing.T) {
		rogue := g.DialToken(t, pod, "rogue-t", true, "")
		tab := consoleTab(t, b, g, pod, "person-t")
		tab.Click("kick rogue", harness.ParticipantPart("rogue", ".kick"))
		tab.Type("the reason", harness.ParticipantPart("rogue", ".kick-reason"), "spamming")
		tab.Click("confirm the kick", harness.ParticipantPart("rogue", ".kick-confirm"))
		if code := rogue.WaitClosed(10 * time.Second); code != wire.CloseKicked {
			t.Fatalf("rogue's connection closed with %d, want %d", code, wire.CloseKicked)
		}
		tab.WaitFor("the kick's answer, and rogue gone", `document.getElementById('participants-note').textContent === 'kicked rogue: 1 connection closed' && `+jsNone(harness.ParticipantPart("rogue", "")), 10*time.Second)
	})

	// A token without the capabilities sees no approve, reject or kick
	// button and a send box that says why it is off; a token whose
	// capabilities could allow the call (the page cannot tell) sees the
	// buttons, and the gateway's refusal of its approval shows as such.
	t.Run("refused", func(t *testing.T) {
		listener := g.DialToken(t, pod, "listener-t", true, "")
		agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
		// reader may not observe: refused observe=1 (403), the page joins
		// as a participant, which the pod is told, and says so.
		reader := consoleTab(t, b, g, pod, "reader-t")
		reader.WaitFor("the page to say it is present", harness.JSMode+` === 'present'`, 5*time.Second)
		listener.AwaitPresence("join", "reader", 10*time.Second)
		narrow := consoleTab(t, b, g, pod, "narrow-t")
		narrow.WaitFor("the page to say it observes", harness.JSMode+` === 'observing'`, 5*time.Second)

		proposeCall(t, agent, "p-refused", "echo", `{"message": "may narrow approve?"}`)
		for _, tab := range []*harness.Browser{reader, narrow} {
			tab.WaitFor("the pending proposal", jsPending("p-refused")+` && `+harness.JSCardText("p-refused", ".p-tool")+` === 'echo'`, 10*time.Second)
		}
		reader.WaitFor("no decision, kick or send for reader", jsNone(".approve-once, .approve-always, .reject, .reject-reason, .kick")+
			` && document.getElementById('send-text').disabled && document.getElementById('send-button').disabled`+
			` && document.getElementById('send-note').textContent.startsWith('This token may not send messages')`+
			` && document.getElementById('proposals-hint').textContent.includes('may not call tools')`, 5*time.Second)
		narrow.WaitFor("approve and reject for narrow, not always (no capability/grant), no kick", `!!document.querySelector(`+harness.JS(harness.ProposalPart("p-refused", ".approve-once"))+`) && !!document.querySelector(`+harness.JS(harness.ProposalPart("p-refused", ".reject"))+`) && `+jsNone(".approve-always, .kick"), 5*time.Second)

		narrow.Click("approve once", harness.ProposalPart("p-refused", ".approve-once"))
		narrow.WaitFor("the refusal next to the proposal, still pending", jsPending("p-refused")+
			` && `+jsCardHas("p-refused", ".p-outcome", "refused by the gateway: capability_violation: only a participant that may make the proposed call itself approves")+
			` && !document.querySelector(`+harness.JS(harness.ProposalPart("p-refused", ".approve-once"))+`).disabled`, 10*time.Second)
		list := request(t, agent, map[string]any{"id": "list-refused", "kind": "gateway/proposals"})
		if ids := harness.IDsOf(list.Payload()["proposals"]); len(ids) != 1 || ids[0] != "p-refused" {
			t.Fatalf("pending after the refused approval: %v", list.Payload())
		}

		// Its proposer withdraws it: it leaves both pages' pending lists.
		agent.Send(map[string]any{"id": "w-refused", "kind": "mcp/withdraw", "correlation_id": "p-refused", "payload": map[string]any{}})
		for _, tab := range []*harness.Browser{reader, narrow} {
			tab.WaitFor("the proposal withdrawn", `!`+jsPending("p-refused")+` && `+jsCardHas("p-refused", ".p-end", "withdrawn by agent"), 10*time.Second)
		}
	})

	// The arguments of a proposal are text: markup shows as written and
	// runs nothing (the page's strict Content-Security-Policy stays on:
	// the harness fails a test on any violation), a number shows as sent,
	// not as JavaScript rounds it, and a character that reorders text
	// shows as its escape.
	t.Run("arguments as text", func(t *testing.T) {
		agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
		tab := consoleTab(t, b, g, pod, "person-t")
		proposeCall(t, agent, "p-markup", "echo",
			`{"message": "<img src=x onerror=window.__xss=1>", "note": "</pre><script>window.__xss=2</script>", "count": 12345678901234567890, "file": "report\u202egnp.exe"}`)
		want := "{\n" +
			`  "message": "<img src=x onerror=window.__xss=1>",` + "\n" +
			`  "note": "</pre><script>window.__xss=2</script>",` + "\n" +
			`  "count": 12345678901234567890,` + "\n" +
			`  "file": "report\u202egnp.exe"` + "\n}"
		tab.WaitFor("the arguments, as text", harness.JSCardText("p-markup", ".p-args")+` === `+harness.JS(want), 10*time.Second)
		tab.Click("open the whole call", harness.ProposalPart("p-markup", ".p-whole summary"))
		tab.WaitFor("the whole call", jsCardHas("p-markup", ".p-call-json", `"name": "echo"`)+` && `+jsCardHas("p-markup", ".p-call-json", `"count": 12345678901234567890`), 5*time.Second)
		if !harness.EvalJS[bool](tab, `window.__xss === undefined`) {
			t.Errorf("window.__xss is set: markup from a proposal ran")
		}
		if n := harness.EvalJS[int](tab, `document.querySelectorAll('img').length`); n != 0 {
			t.Errorf("the page has %d img elements: markup from a proposal was parsed", n)
		}
		if n := harness.EvalJS[int](tab, `[...document.scripts].filter((s) => !s.src).length`); n != 0 {
			t.Errorf("the page has %d inline script elements", n)
		}
		tab.Type("the reason", harness.ProposalPart("p-markup", ".reject-reason"), "no markup")
		tab.Click("reject", harness.ProposalPart("p-markup", ".reject"))
		proposalEvent(t, agent, "p-markup", wire.ProposalRejected)
	})
}
