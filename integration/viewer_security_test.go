package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestViewerToken: with a token file the page joins with the token (in the
// WebSocket URL only, never in the page's address), survives a reload
// through session storage, and a missing, wrong or forbidden token gives a
// readable message.
func TestViewerToken(t *testing.T) {
	file := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "viewer-secret", "participant": "viewer", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "alice-secret", "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token": "lab-secret", "participant": "labbot", "capabilities": ["chat"], "pods": ["lab"]}
]}`)
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = file })
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-auth"

	// A link with no token: the gateway wants one.
	b.Open(harness.ViewerURL(g.URL, pod, ""))
	b.JoinError("401", "unauthorized", "a token is required", "token file")
	if v := harness.EvalJS[string](b, `document.getElementById('pod').value`); v != pod {
		t.Errorf("the form's pod is %q, want %q from the link", v, pod)
	}

	b.SubmitJoin(pod, "", "not-a-token")
	b.JoinError("401", "unauthorized", "unknown token")

	b.SubmitJoin(pod, "", "lab-secret")
	b.JoinError("403", "forbidden", "may not join pod")

	alice := g.DialToken(t, pod, "alice-secret", true, "")
	b.SubmitJoin(pod, "", "viewer-secret")
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	b.WaitFor("the participants", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'viewer (you)|alice'`, 10*time.Second)
	alice.Send(harness.TextEnv("chat", nil, "hello viewer"))
	b.WaitFor("alice's chat", harness.JSHasRow("hello viewer"), 10*time.Second)
	if href := harness.EvalJS[string](b, `location.href`); strings.Contains(href, "secret") || !strings.Contains(href, "pod="+pod) {
		t.Errorf("the page's address is %s: want the pod and no token", href)
	}

	// A reload joins again with the token kept in session storage.
	b.Open(harness.EvalJS[string](b, `location.href`))
	b.WaitFor("the viewer to be live after a reload", harness.JSLive, 20*time.Second)
	alice.Send(harness.TextEnv("chat", nil, "hello again"))
	b.WaitFor("alice's second chat", harness.JSHasRow("hello again"), 10*time.Second)

	for _, u := range b.RequestURLs() {
		if strings.Contains(u, "secret") && !strings.Contains(u, "/ws?") {
			t.Errorf("a request other than /ws carried a token: %s", u)
		}
	}
}

// TestViewerHostileStrings: markup in every field that can hold text
// (kind, ids, correlation ids, context id, type, parent and metadata,
// payload text, lifecycle summary, unknown fields) shows as text and never
// runs; participant ids cannot hold markup, so the most unusual one they
// allow is used.
func TestViewerHostileStrings(t *testing.T) {
	g := harness.StartGateway(t, nil)
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-xss"
	const img = `<img src=x onerror=window.__xss=1>`
	const script = `<script>window.__xss=2</script>`
	const who = "mallory@evil.example:8080_-.x"
	m := g.Dial(t, pod, who, "")
	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)

	hostileCtx := map[string]any{"id": img, "type": img, "parent": script, "metadata": map[string]any{"note": img}}
	m.Send(map[string]any{
		"id": img + "#1", "kind": img, "correlation_id": []string{img, script},
		"context": hostileCtx, "payload": map[string]any{"text": img, "more": script}, "note": script,
	})
	m.Send(map[string]any{
		"id": script + "#2", "kind": script, "context": map[string]any{"id": script + "-2", "type": "t", "parent": img},
		"payload":   script,
		"lifecycle": map[string]any{"mode": "transient", "summary": img},
	})
	m.Send(map[string]any{"id": script + "#3", "kind": "chat", "payload": map[string]any{"text": script, "other": img}})
	m.Send(map[string]any{"id": img + "#4", "kind": "conclusion", "context": map[string]any{"id": img}, "payload": img})

	b.WaitFor("the hostile context concluded", harness.JSField+`(`+harness.JS(img)+`, '.state') === 'concluded: conclusion'`, 15*time.Second)
	b.WaitFor("the main chat", harness.JSHasRow(script), 10*time.Second)
	b.WaitFor("the participant", `[...document.querySelectorAll('#participants .pid')].some(e => e.textContent === `+harness.JS(who)+`)`, 10*time.Second)
	b.ClickItem(script)
	b.WaitFor("the hostile context's envelopes", harness.JSHasRow(img+"#1")+` && `+harness.JSHasRow(script+"#2"), 10*time.Second)
	// Open every envelope's JSON, so that each field is drawn.
	b.Do("open the JSON", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('#envelopes details').forEach((d) => { d.open = true; })`))
	b.WaitFor("the JSON drawn", `[...document.querySelectorAll('#envelopes pre')].some((p) => p.textContent.includes('"note": '))`, 10*time.Second)
	b.ClickItem(img)
	b.WaitFor("the other hostile context's view", `document.getElementById('view-title').textContent === `+harness.JS(img), 10*time.Second)

	text := harness.EvalJS[string](b, `document.body.textContent`)
	for _, s := range []string{img, script, img + "#1", script + "#2", script + "-2", "summary: " + img, who} {
		if !strings.Contains(text, s) {
			t.Errorf("the page does not show %q as text", s)
		}
	}
	if !harness.EvalJS[bool](b, `window.__xss === undefined`) {
		t.Errorf("window.__xss is set: markup from an envelope ran")
	}
	if n := harness.EvalJS[int](b, `document.querySelectorAll('img').length`); n != 0 {
		t.Errorf("the page has %d img elements: markup from an envelope was parsed", n)
	}
	if n := harness.EvalJS[int](b, `[...document.scripts].filter((s) => !s.src).length`); n != 0 {
		t.Errorf("the page has %d inline script elements", n)
	}
}
