package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/bridge/bridgetest"
	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// TestViewerScreenshot draws a real scripted pod: three agents, a task
// with research, planning and review sub-contexts, reasoning that
// concluded, a path context and chat in the main context. With
// MCPP_VIEWER_SCREENSHOT=1 it saves the page as docs/viewer.png, the
// picture the README shows.
func TestViewerScreenshot(t *testing.T) {
	g := harness.StartGateway(t, nil)
	b := harness.NewBrowser(t, harness.BrowserOpts{Width: 1400, Height: 860})
	const pod = "lab"
	planner := g.Dial(t, pod, "planner", "")
	researcher := g.Dial(t, pod, "researcher", "")
	critic := g.Dial(t, pod, "critic", "")

	task := harness.ContextField("task-42", "workflow", "")
	research := harness.ContextField("research", "research", "task-42")
	search := harness.ContextField("search-1", "reasoning", "research")
	search2 := harness.ContextField("search-2", "reasoning", "research")
	plan := harness.ContextField("plan", "planning", "task-42")
	review := harness.ContextField("review", "review", "task-42")
	planner.Send(harness.TextEnv("chat", nil, "New task: compare the three queue designs and recommend one."))
	planner.Send(harness.TextEnv("task/start", task, "compare queue designs"))
	researcher.Send(harness.TextEnv("context/branch", research, "collect the designs and their trade-offs"))
	researcher.Send(harness.TextEnv("reasoning/step", search, "NATS JetStream keeps a stream per subject; replay by sequence"))
	researcher.Send(harness.TextEnv("reasoning/step", search, "Kafka partitions give order per key, not per pod"))
	researcher.Send(harness.TextEnv("reasoning/conclusion", search, "JetStream fits: one subject per pod keeps order"))
	// The viewer joins here: what came before, it draws from the pod's
	// history (and from the gateway's contexts); the rest arrives live.
	critic.Send(harness.TextEnv("chat", nil, "I'll review the plan when it is ready."))
	b.Open(harness.ViewerURL(g.URL, pod, "viewer"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	b.WaitFor("the contexts known before", harness.JSItem+`('search-1')`, 10*time.Second)
	planner.Send(harness.TextEnv("plan/draft", plan, "1. benchmark  2. failure drills  3. write-up"))
	planner.Send(harness.TextEnv("plan/draft", plan, "add: resume after restart"))
	critic.Send(harness.TextEnv("review/comment", review, "Step 2 needs a network partition case"))
	critic.Send(harness.TextEnv("reasoning/step", harness.ContextField("review-check", "reasoning", "review"), "does step 2 cover a lost leader?"))
	critic.Send(harness.TextEnv("conclusion", review, "plan accepted with one change"))
	critic.Send(harness.TextEnv("check", "deploy/staging/smoke", "staging smoke test passed"))
	researcher.Send(harness.TextEnv("reasoning/step", search2, "Redis streams: XREAD with last id works as resume"))
	researcher.Send(map[string]any{"kind": "search/results", "context": research,
		"payload":   map[string]any{"text": "queue replay semantics: NATS, Kafka, Redis streams, 15 results"},
		"lifecycle": map[string]any{"mode": "transient", "summary": "15 search results (page 1/3)"}})
	planner.Send(harness.TextEnv("chat", nil, "Research is in; writing the recommendation."))
	researcher.Send(map[string]any{"kind": "status", "payload": map[string]any{"text": "typing…"}, "lifecycle": map[string]any{"mode": "ephemeral"}})

	b.WaitFor("the tree", harness.JSItem+`('deploy/staging/smoke') && `+harness.JSField+`('review', '.state') === 'concluded: conclusion'`, 15*time.Second)
	b.WaitFor("the participants", `document.querySelectorAll('#participants li').length === 4`, 10*time.Second)
	b.ClickItem("research")
	b.WaitFor("research's envelopes", harness.JSHasRow("Redis streams")+` && `+harness.JSHasRow("15 search results"), 10*time.Second)
	b.WaitFor("review folded", harness.JSItem+`('review').getAttribute('aria-expanded') === 'false'`, 10*time.Second)
	b.Do("blur", harness.EvalVoid(`document.activeElement.blur()`))

	saveScreenshot(t, b, "viewer.png")
}

// TestViewerScreenshotProposal draws the pod of the README's "People in
// the loop": boss watches in the viewer (observing); agent may only
// propose; the bridge everything serves tools. One proposal was approved
// on the page and answered; another waits, with its exact call. With
// MCPP_VIEWER_SCREENSHOT=1 it saves the page as docs/viewer-proposal.png.
func TestViewerScreenshotProposal(t *testing.T) {
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "boss-secret", "participant": "boss", "capabilities": ["chat", "mcp/request", "capability/grant", "gateway/observe", "gateway/kick"], "pods": ["lab"]},
  {"token": "agent-secret", "participant": "agent", "capabilities": ["chat", "mcp/proposal"], "pods": ["lab"]},
  {"token": "tools-secret", "participant": "everything", "capabilities": ["mcp/response*", "mcp/notification"], "pods": ["lab"]},
  {"token": "probe-secret", "participant": "probe", "capabilities": ["mcp/request", "gateway/observe"], "pods": ["lab"]}
]}`)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = tokens; c.History = 1000 })
	const pod = "lab"
	probe := bridgetest.DialWith(t, g.WS, client.Options{Pod: pod, Token: "probe-secret", Observe: true})
	startBridgeProc(t, g, probe, pod, "everything", []string{"--token", "tools-secret"}, goServer(t))
	b := harness.NewBrowser(t, harness.BrowserOpts{Width: 1400, Height: 860})
	agent := g.DialToken(t, pod, "agent-secret", true, "routing=directed")

	release := harness.ContextField("release-2.3", "task", "")
	agent.Send(harness.TextEnv("chat", nil, "Release 2.3.1 is tagged; I'll post the notes and then deploy."))
	agent.Send(harness.TextEnv("chat", release, "notes drafted: 14 fixes, 2 features"))
	agent.Send(harness.TextEnv("chat", harness.ContextField("checks", "reasoning", "release-2.3"), "staging smoke tests passed"))
	agent.Send(map[string]any{"id": "p-notes", "kind": "mcp/proposal", "to": []string{"everything"}, "context": release,
		"payload": json.RawMessage(bridgetest.ToolCall("notes", "echo", map[string]any{"message": "release notes for 2.3.1 posted"}))})
	proposalEvent(t, agent, "p-notes", wire.ProposalPending)

	b.Open(g.URL + "/")
	b.SubmitJoin(pod, "", "boss-secret")
	b.WaitFor("the viewer to be live", harness.JSLive+` && `+harness.JSMode+` === 'observing'`, 20*time.Second)
	b.Click("approve the notes", harness.ProposalPart("p-notes", ".approve-once"))
	b.WaitFor("the answer to the approved call", `(`+harness.JSCardText("p-notes", ".p-answer")+` ?? '').includes('Echo: release notes')`, 10*time.Second)
	agent.Send(harness.TextEnv("chat", release, "notes are up; asking to deploy"))
	agent.Send(map[string]any{"id": "p-deploy", "kind": "mcp/proposal", "to": []string{"everything"}, "context": release,
		"payload": json.RawMessage(bridgetest.ToolCall("deploy", "echo", map[string]any{
			"message": "deploy api 2.3.1 to production", "delay_ms": 1500}))})
	b.WaitFor("the pending proposal", harness.JSPending+`().includes('p-deploy')`, 10*time.Second)
	b.ClickItem("release-2.3")
	b.WaitFor("release-2.3's envelopes", harness.JSHasRow("notes are up"), 10*time.Second)
	b.Do("blur", harness.EvalVoid(`document.activeElement.blur()`))
	saveScreenshot(t, b, "viewer-proposal.png")
}

// saveScreenshot captures the page and, with MCPP_VIEWER_SCREENSHOT=1,
// saves it as docs/NAME.
func saveScreenshot(t *testing.T, b *harness.Browser, name string) {
	t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10000 {
		t.Fatalf("the screenshot is only %d bytes", len(png))
	}
	if os.Getenv("MCPP_VIEWER_SCREENSHOT") == "" {
		t.Logf("screenshot taken (%d bytes); set MCPP_VIEWER_SCREENSHOT=1 to save it as docs/%s", len(png), name)
		return
	}
	out := filepath.Join("..", "docs", name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", out, len(png))
}
