package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
)

// TestViewerLoadsNothingFromOutside: the page, its scripts, styles and
// icon, its WebSocket and its requests all go to the gateway's host; no
// request leaves it (gateways run in closed networks).
func TestViewerLoadsNothingFromOutside(t *testing.T) {
	g := startGateway(t, nil)
	b := newBrowser(t, browserOpts{})
	alice := g.dial(t, "viewer-local", "alice", "")

	b.open(viewerURL(g.URL, "viewer-local", "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	alice.send(ctxEnv("chat", nil, "hello from alice"))
	alice.send(ctxEnv("step", objCtx("r1", "reasoning", ""), "thinking"))
	b.waitFor("alice's chat", jsHasRow("hello from alice"), 10*time.Second)
	b.clickItem("r1")
	b.waitFor("r1's envelope", jsHasRow("thinking"), 10*time.Second)
	// Load older: a gateway/history request over the WebSocket, not HTTP.
	b.do("load older", chromedp.Click(chromedp.CSS(`#load-older`)))
	b.waitFor("an answer to load older", `document.getElementById('older-note').textContent !== 'loading…'`, 10*time.Second)

	gw, _ := url.Parse(g.URL)
	urls := b.requestURLs()
	seen := map[string]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("the page requested %q, which does not parse: %v", raw, err)
			continue
		}
		if u.Host != gw.Host {
			t.Errorf("the page requested %s, outside the gateway %s", raw, gw.Host)
		}
		seen[u.Scheme+" "+u.Path] = true
	}
	for _, want := range []string{"http /", "http /main.js", "http /viewer.css", "http /tree.js", "ws /ws"} {
		if !seen[want] {
			t.Errorf("the page never requested %s; it requested %v", want, urls)
		}
	}
	t.Logf("the page made %d requests, all to %s: %s", len(urls), gw.Host, strings.Join(urls, " "))
}

// field waits until a context's row shows want in the field sel.
func (b *browser) field(id, sel, want string) {
	b.t.Helper()
	b.waitFor(fmt.Sprintf("%s %s to be %q", id, sel, want), fmt.Sprintf(`%s(%s, %s) === %s`, jsField, js(id), js(sel), js(want)), 15*time.Second)
}

// parentIs checks where a context hangs in the tree ("" is the root).
func (b *browser) parentIs(id, parent string) {
	b.t.Helper()
	want := "null"
	if parent != "" {
		want = js(parent)
	}
	b.waitFor(fmt.Sprintf("%s under %q", id, parent), fmt.Sprintf(`%s(%s) === %s`, jsParent, js(id), want), 15*time.Second)
}

// heartbeat sends an envelope in each context every interval until the
// test ends, so that a short --context-timeout concludes only the contexts
// the test leaves idle.
func heartbeat(t *testing.T, c *client, every time.Duration, ctxs ...any) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			for _, ctx := range ctxs {
				b, _ := json.Marshal(ctxEnv("heartbeat", ctx, fmt.Sprintf("beat %d", n)))
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.conn.Write(wctx, websocket.MessageText, b)
				cancel()
				if err != nil {
					return
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestViewerTree: the tree of a scripted pod (three levels and a fourth,
// a conclusion, a timeout, a path context), drawn, updated live, folded
// and unfolded; clicking a node shows its envelopes; the participants
// follow presence.
func TestViewerTree(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.ContextTimeout = 500 * time.Millisecond })
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-tree"
	alice := g.dial(t, pod, "alice", "")
	b.open(viewerURL(g.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	b.waitFor("you and alice in the participants", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'watcher (you)|alice'`, 10*time.Second)

	alice.send(ctxEnv("chat", nil, "hello main"))
	alice.send(ctxEnv("task/start", objCtx("task-1", "workflow", ""), "task started"))
	alice.send(ctxEnv("plan/step", objCtx("plan", "planning", "task-1"), "planning step 1"))
	alice.send(ctxEnv("reasoning/step", objCtx("r1", "reasoning", "plan"), "thinking"))
	alice.send(ctxEnv("reasoning/step", objCtx("r1a", "reasoning", "r1"), "sub-thought"))
	alice.send(ctxEnv("reasoning/step", objCtx("idle-1", "reasoning", "task-1"), "will time out"))
	alice.send(ctxEnv("check", "a/b/c", "path step"))
	alice.send(ctxEnv("conclusion", objCtx("r1", "", ""), "r1 done"))
	// Activity in hb keeps plan and task-1 alive; a/b/c keeps itself.
	heartbeat(t, g.dial(t, pod, "heart", ""), 100*time.Millisecond, objCtx("hb", "heartbeat", "plan"), "a/b/c")

	b.field("idle-1", ".state", "concluded: timeout")
	b.field("r1", ".state", "concluded: conclusion")
	b.field("r1a", ".state", "concluded: parent_concluded")
	b.field("plan", ".state", "active")
	b.field("task-1", ".state", "active")
	b.field("a/b/c", ".state", "active")
	b.field("a/b", ".state", "path prefix")
	b.field("plan", ".type", "planning")
	b.field("r1a", ".depth", "depth 4")
	b.field("a/b/c", ".depth", "depth 3")
	b.parentIs("task-1", "")
	b.parentIs("plan", "task-1")
	b.parentIs("r1", "plan")
	b.parentIs("r1a", "r1")
	b.parentIs("idle-1", "task-1")
	b.parentIs("hb", "plan")
	b.parentIs("a/b/c", "a/b")
	b.parentIs("a/b", "a")
	b.parentIs("a", "")
	b.waitFor("r1a's level", jsItem+`('r1a').getAttribute('aria-level') === '4'`, 5*time.Second)
	b.waitFor("task-1's totals", jsField+`('task-1', '.totals').startsWith('nested: 5 ctx · ')`, 10*time.Second)
	b.field("r1", ".msgs", "2 msg")

	// The concluded subtree is folded; it unfolds and folds again.
	b.waitFor("r1 folded", jsItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+jsShown+`('r1a')`, 10*time.Second)
	twisty := chromedp.Click(chromedp.CSS(`#tree [data-id="r1"] > .row .twisty`))
	b.do("unfold r1", twisty)
	b.waitFor("r1 unfolded", jsItem+`('r1').getAttribute('aria-expanded') === 'true' && `+jsShown+`('r1a')`, 5*time.Second)
	b.do("fold r1", twisty)
	b.waitFor("r1 folded again", jsItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+jsShown+`('r1a')`, 5*time.Second)

	// Live: a new context and more envelopes.
	late := objCtx("late-1", "reasoning", "task-1")
	alice.send(ctxEnv("reasoning/step", late, "late 1"))
	b.field("late-1", ".msgs", "1 msg")
	b.parentIs("late-1", "task-1")
	alice.send(ctxEnv("reasoning/step", late, "late 2"))
	alice.send(ctxEnv("reasoning/step", late, "late 3"))
	b.field("late-1", ".msgs", "3 msg")
	b.waitFor("task-1's totals with late-1", jsField+`('task-1', '.totals').startsWith('nested: 6 ctx · ')`, 10*time.Second)

	// Clicking a node shows its envelopes (with its nested contexts').
	b.clickItem("plan")
	b.waitFor("plan's envelopes", `document.getElementById('view-title').textContent === 'plan' && `+jsHasRow("planning step 1")+` && `+jsHasRow("thinking")+` && `+jsHasRow("r1 done"), 10*time.Second)
	b.clickItem("r1")
	b.waitFor("r1's envelopes", `document.getElementById('view-title').textContent === 'r1' && `+jsHasRow("thinking")+` && `+jsHasRow("r1 done")+` && `+jsHasRow("concluded: conclusion")+` && !`+jsHasRow("planning step 1"), 10*time.Second)
	b.clickItem("late-1")
	alice.send(ctxEnv("reasoning/step", late, "late 4, live"))
	b.waitFor("late-1's live envelope", jsHasRow("late 4, live"), 10*time.Second)
	b.clickItem("")
	b.waitFor("main's envelopes", `document.getElementById('view-title').textContent === 'main' && `+jsHasRow("hello main")+` && !`+jsHasRow("thinking"), 10*time.Second)

	// Participants follow presence.
	bob := g.dial(t, pod, "bob", "")
	b.waitFor("bob in the participants", `[...document.querySelectorAll('#participants .pid')].some(e => e.textContent === 'bob')`, 10*time.Second)
	_ = bob.conn.Close(websocket.StatusNormalClosure, "")
	b.waitFor("bob gone", `![...document.querySelectorAll('#participants .pid')].some(e => e.textContent === 'bob')`, 10*time.Second)
}

// TestViewerTreeKeyboard: the tree is a WAI-ARIA tree: arrows move, Right
// and Left unfold and fold (or go to the first child and the parent),
// Enter shows a context's envelopes, Home and End go to the ends.
func TestViewerTreeKeyboard(t *testing.T) {
	g := startGateway(t, nil)
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-keys"
	alice := g.dial(t, pod, "alice", "")
	b.open(viewerURL(g.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	alice.send(ctxEnv("task/start", objCtx("task-1", "workflow", ""), "task started"))
	alice.send(ctxEnv("plan/step", objCtx("plan", "planning", "task-1"), "planning step 1"))
	alice.send(ctxEnv("reasoning/step", objCtx("r1", "reasoning", "plan"), "thinking"))
	alice.send(ctxEnv("reasoning/step", objCtx("r1a", "reasoning", "r1"), "sub-thought"))
	alice.send(ctxEnv("conclusion", objCtx("r1", "", ""), "r1 done"))
	alice.send(ctxEnv("note", objCtx("other", "notes", ""), "another root"))
	b.field("r1", ".state", "concluded: conclusion")
	b.field("other", ".msgs", "1 msg")

	b.waitFor("a tree", `document.getElementById('tree').getAttribute('role') === 'tree' && document.querySelector('#tree [role=group]') !== null`, 5*time.Second)
	focused := func(want string) {
		t.Helper()
		b.waitFor("focus on "+want, `(document.activeElement.dataset.id ?? (document.activeElement.dataset.main !== undefined ? 'main' : '?')) === `+js(want), 5*time.Second)
	}
	key := func(k string) {
		t.Helper()
		b.do("key", chromedp.KeyEvent(k))
	}
	b.clickItem("")
	focused("main")
	key(kb.ArrowDown)
	focused("task-1")
	key(kb.ArrowDown)
	focused("plan")
	key(kb.ArrowDown)
	focused("r1")
	key(kb.ArrowDown) // r1 is folded: r1a is skipped
	focused("other")
	key(kb.ArrowUp)
	focused("r1")
	key(kb.ArrowRight) // unfold
	b.waitFor("r1 unfolded", jsItem+`('r1').getAttribute('aria-expanded') === 'true' && `+jsShown+`('r1a')`, 5*time.Second)
	focused("r1")
	key(kb.ArrowRight) // to the first child
	focused("r1a")
	key(kb.ArrowLeft) // a leaf: to the parent
	focused("r1")
	key(kb.ArrowLeft) // fold
	b.waitFor("r1 folded", jsItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+jsShown+`('r1a')`, 5*time.Second)
	key(kb.ArrowLeft)
	focused("plan")
	key(kb.Enter)
	b.waitFor("plan selected", `document.getElementById('view-title').textContent === 'plan' && `+jsItem+`('plan').getAttribute('aria-selected') === 'true' && `+jsHasRow("planning step 1"), 5*time.Second)
	key(kb.End)
	focused("other")
	key(kb.Home)
	focused("main")
	key(" ")
	b.waitFor("main selected", `document.getElementById('view-title').textContent === 'main'`, 5*time.Second)
}
