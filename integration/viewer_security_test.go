package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/gateway"
)

// submitJoin fills the join form and sends it.
func (b *browser) submitJoin(pod, participant, token string) {
	b.t.Helper()
	b.do("fill the join form",
		chromedp.WaitVisible(chromedp.CSS(`#join-form`)),
		evalVoid(fmt.Sprintf(`document.getElementById('pod').value = %s; document.getElementById('participant').value = %s; document.getElementById('token').value = %s`,
			js(pod), js(participant), js(token))),
		chromedp.Click(chromedp.CSS(`#join-form button[type=submit]`)),
	)
}

// joinError waits for the join form's message to contain every part.
func (b *browser) joinError(parts ...string) {
	b.t.Helper()
	cond := `!document.getElementById('join').hidden && !document.getElementById('join-error').hidden`
	for _, p := range parts {
		cond += fmt.Sprintf(` && document.getElementById('join-error').textContent.includes(%s)`, js(p))
	}
	b.waitFor("the message "+strings.Join(parts, ", "), cond, 15*time.Second)
}

// TestViewerToken: with a token file the page joins with the token (in the
// WebSocket URL only, never in the page's address), survives a reload
// through session storage, and a missing, wrong or forbidden token gives a
// readable message.
func TestViewerToken(t *testing.T) {
	file := writeFile(t, "tokens.json", `{"tokens": [
  {"token": "viewer-secret", "participant": "viewer", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "alice-secret", "participant": "alice", "capabilities": ["*"], "pods": ["*"]},
  {"token": "lab-secret", "participant": "labbot", "capabilities": ["chat"], "pods": ["lab"]}
]}`)
	g := startGateway(t, func(c *gateway.Config) { c.Tokens = file })
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-auth"

	// A link with no token: the gateway wants one.
	b.open(viewerURL(g.URL, pod, ""))
	b.joinError("401", "unauthorized", "a token is required", "token file")
	if v := evalJS[string](b, `document.getElementById('pod').value`); v != pod {
		t.Errorf("the form's pod is %q, want %q from the link", v, pod)
	}

	b.submitJoin(pod, "", "not-a-token")
	b.joinError("401", "unauthorized", "unknown token")

	b.submitJoin(pod, "", "lab-secret")
	b.joinError("403", "forbidden", "may not join pod")

	alice := g.dialToken(t, pod, "alice-secret", true, "")
	b.submitJoin(pod, "", "viewer-secret")
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	b.waitFor("the participants", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'viewer (you)|alice'`, 10*time.Second)
	alice.send(ctxEnv("chat", nil, "hello viewer"))
	b.waitFor("alice's chat", jsHasRow("hello viewer"), 10*time.Second)
	if href := evalJS[string](b, `location.href`); strings.Contains(href, "secret") || !strings.Contains(href, "pod="+pod) {
		t.Errorf("the page's address is %s: want the pod and no token", href)
	}

	// A reload joins again with the token kept in session storage.
	b.open(evalJS[string](b, `location.href`))
	b.waitFor("the viewer to be live after a reload", jsLive, 20*time.Second)
	alice.send(ctxEnv("chat", nil, "hello again"))
	b.waitFor("alice's second chat", jsHasRow("hello again"), 10*time.Second)

	for _, u := range b.requestURLs() {
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
	g := startGateway(t, nil)
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-xss"
	const img = `<img src=x onerror=window.__xss=1>`
	const script = `<script>window.__xss=2</script>`
	const who = "mallory@evil.example:8080_-.x"
	m := g.dial(t, pod, who, "")
	b.open(viewerURL(g.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)

	hostileCtx := map[string]any{"id": img, "type": img, "parent": script, "metadata": map[string]any{"note": img}}
	m.send(map[string]any{
		"id": img + "#1", "kind": img, "correlation_id": []string{img, script},
		"context": hostileCtx, "payload": map[string]any{"text": img, "more": script}, "note": script,
	})
	m.send(map[string]any{
		"id": script + "#2", "kind": script, "context": map[string]any{"id": script + "-2", "type": "t", "parent": img},
		"payload":   script,
		"lifecycle": map[string]any{"mode": "transient", "summary": img},
	})
	m.send(map[string]any{"id": script + "#3", "kind": "chat", "payload": map[string]any{"text": script, "other": img}})
	m.send(map[string]any{"id": img + "#4", "kind": "conclusion", "context": map[string]any{"id": img}, "payload": img})

	b.waitFor("the hostile context concluded", jsField+`(`+js(img)+`, '.state') === 'concluded: conclusion'`, 15*time.Second)
	b.waitFor("the main chat", jsHasRow(script), 10*time.Second)
	b.waitFor("the participant", `[...document.querySelectorAll('#participants .pid')].some(e => e.textContent === `+js(who)+`)`, 10*time.Second)
	b.clickItem(script)
	b.waitFor("the hostile context's envelopes", jsHasRow(img+"#1")+` && `+jsHasRow(script+"#2"), 10*time.Second)
	// Open every envelope's JSON, so that each field is drawn.
	b.do("open the JSON", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('#envelopes details').forEach((d) => { d.open = true; })`))
	b.waitFor("the JSON drawn", `[...document.querySelectorAll('#envelopes pre')].some((p) => p.textContent.includes('"note": '))`, 10*time.Second)
	b.clickItem(img)
	b.waitFor("the other hostile context's view", `document.getElementById('view-title').textContent === `+js(img), 10*time.Second)

	text := evalJS[string](b, `document.body.textContent`)
	for _, s := range []string{img, script, img + "#1", script + "#2", script + "-2", "summary: " + img, who} {
		if !strings.Contains(text, s) {
			t.Errorf("the page does not show %q as text", s)
		}
	}
	if !evalJS[bool](b, `window.__xss === undefined`) {
		t.Errorf("window.__xss is set: markup from an envelope ran")
	}
	if n := evalJS[int](b, `document.querySelectorAll('img').length`); n != 0 {
		t.Errorf("the page has %d img elements: markup from an envelope was parsed", n)
	}
	if n := evalJS[int](b, `[...document.scripts].filter((s) => !s.src).length`); n != 0 {
		t.Errorf("the page has %d inline script elements", n)
	}
}
