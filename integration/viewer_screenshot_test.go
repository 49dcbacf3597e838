package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestViewerScreenshot draws a real scripted pod: three agents, a task
// with research, planning and review sub-contexts, reasoning that
// concluded, a path context and chat in the main context. With
// MCPP_VIEWER_SCREENSHOT=1 it saves the page as docs/viewer.png, the
// picture the README shows.
func TestViewerScreenshot(t *testing.T) {
	g := startGateway(t, nil)
	b := newBrowser(t, browserOpts{width: 1400, height: 860})
	const pod = "lab"
	planner := g.dial(t, pod, "planner", "")
	researcher := g.dial(t, pod, "researcher", "")
	critic := g.dial(t, pod, "critic", "")

	task := objCtx("task-42", "workflow", "")
	research := objCtx("research", "research", "task-42")
	search := objCtx("search-1", "reasoning", "research")
	search2 := objCtx("search-2", "reasoning", "research")
	plan := objCtx("plan", "planning", "task-42")
	review := objCtx("review", "review", "task-42")
	planner.send(ctxEnv("chat", nil, "New task: compare the three queue designs and recommend one."))
	planner.send(ctxEnv("task/start", task, "compare queue designs"))
	researcher.send(ctxEnv("context/branch", research, "collect the designs and their trade-offs"))
	researcher.send(ctxEnv("reasoning/step", search, "NATS JetStream keeps a stream per subject; replay by sequence"))
	researcher.send(ctxEnv("reasoning/step", search, "Kafka partitions give order per key, not per pod"))
	researcher.send(ctxEnv("reasoning/conclusion", search, "JetStream fits: one subject per pod keeps order"))
	// The viewer joins here: what came before, it draws from the pod's
	// history (and from the gateway's contexts); the rest arrives live.
	critic.send(ctxEnv("chat", nil, "I'll review the plan when it is ready."))
	b.open(viewerURL(g.URL, pod, "viewer"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	b.waitFor("the contexts known before", jsItem+`('search-1')`, 10*time.Second)
	planner.send(ctxEnv("plan/draft", plan, "1. benchmark  2. failure drills  3. write-up"))
	planner.send(ctxEnv("plan/draft", plan, "add: resume after restart"))
	critic.send(ctxEnv("review/comment", review, "Step 2 needs a network partition case"))
	critic.send(ctxEnv("reasoning/step", objCtx("review-check", "reasoning", "review"), "does step 2 cover a lost leader?"))
	critic.send(ctxEnv("conclusion", review, "plan accepted with one change"))
	critic.send(ctxEnv("check", "deploy/staging/smoke", "staging smoke test passed"))
	researcher.send(ctxEnv("reasoning/step", search2, "Redis streams: XREAD with last id works as resume"))
	researcher.send(map[string]any{"kind": "mcp/request:tools/call", "context": research,
		"payload":   map[string]any{"method": "tools/call", "params": map[string]any{"name": "search", "arguments": map[string]any{"q": "queue replay semantics"}}},
		"lifecycle": map[string]any{"mode": "transient", "summary": "15 search results (page 1/3)"}})
	planner.send(ctxEnv("chat", nil, "Research is in; writing the recommendation."))
	researcher.send(map[string]any{"kind": "status", "payload": map[string]any{"text": "typing…"}, "lifecycle": map[string]any{"mode": "ephemeral"}})

	b.waitFor("the tree", jsItem+`('deploy/staging/smoke') && `+jsField+`('review', '.state') === 'concluded: conclusion'`, 15*time.Second)
	b.waitFor("the participants", `document.querySelectorAll('#participants li').length === 4`, 10*time.Second)
	b.clickItem("research")
	b.waitFor("research's envelopes", jsHasRow("Redis streams"), 10*time.Second)
	b.waitFor("review folded", jsItem+`('review').getAttribute('aria-expanded') === 'false'`, 10*time.Second)
	b.do("blur", evalVoid(`document.activeElement.blur()`))

	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10000 {
		t.Fatalf("the screenshot is only %d bytes", len(png))
	}
	if os.Getenv("MCPP_VIEWER_SCREENSHOT") == "" {
		t.Logf("screenshot taken (%d bytes); set MCPP_VIEWER_SCREENSHOT=1 to save it as docs/viewer.png", len(png))
		return
	}
	out := filepath.Join("..", "docs", "viewer.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", out, len(png))
}
