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

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestViewerLoadsNothingFromOutside: the page, its scripts, styles and
// icon, its WebSocket and its requests all go to the gateway's host; no
// request leaves it (gateways run in closed networks).
func TestViewerLoadsNothingFromOutside(t *testing.T) {
	g := harness.StartGateway(t, nil)
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	alice := g.Dial(t, "viewer-local", "alice", "")

	b.Open(harness.ViewerURL(g.URL, "viewer-local", "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	alice.Send(harness.TextEnv("chat", nil, "hello from alice"))
	alice.Send(harness.TextEnv("step", harness.ContextField("r1", "reasoning", ""), "thinking"))
	b.WaitFor("alice's chat", harness.JSHasRow("hello from alice"), 10*time.Second)
	b.ClickItem("r1")
	b.WaitFor("r1's envelope", harness.JSHasRow("thinking"), 10*time.Second)
	// Load older: a gateway/history request over the WebSocket, not HTTP.
	b.Do("load older", chromedp.Click(chromedp.CSS(`#load-older`)))
	b.WaitFor("an answer to load older", `document.getElementById('older-note').textContent !== 'loading…'`, 10*time.Second)

	gw, _ := url.Parse(g.URL)
	urls := b.RequestURLs()
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

// heartbeat sends an envelope in each context every interval until the
// test ends, so that a short --context-timeout concludes only the contexts
// the test leaves idle.
func heartbeat(t *testing.T, c *harness.Client, every time.Duration, ctxs ...any) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			for _, ctx := range ctxs {
				b, _ := json.Marshal(harness.TextEnv("heartbeat", ctx, fmt.Sprintf("beat %d", n)))
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := c.Conn.Write(wctx, b)
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
	g := harness.StartGateway(t, func(c *gateway.Config) { c.ContextTimeout = 500 * time.Millisecond })
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-tree"
	alice := g.Dial(t, pod, "alice", "")
	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	b.WaitFor("you and alice in the participants", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'watcher (you)|alice'`, 10*time.Second)

	alice.Send(harness.TextEnv("chat", nil, "hello main"))
	alice.Send(harness.TextEnv("task/start", harness.ContextField("task-1", "workflow", ""), "task started"))
	alice.Send(harness.TextEnv("plan/step", harness.ContextField("plan", "planning", "task-1"), "planning step 1"))
	alice.Send(harness.TextEnv("reasoning/step", harness.ContextField("r1", "reasoning", "plan"), "thinking"))
	alice.Send(harness.TextEnv("reasoning/step", harness.ContextField("r1a", "reasoning", "r1"), "sub-thought"))
	alice.Send(harness.TextEnv("reasoning/step", harness.ContextField("idle-1", "reasoning", "task-1"), "will time out"))
	alice.Send(harness.TextEnv("check", "a/b/c", "path step"))
	alice.Send(harness.TextEnv("conclusion", harness.ContextField("r1", "", ""), "r1 done"))
	// Activity in hb keeps plan and task-1 alive; a/b/c keeps itself.
	heartbeat(t, g.Dial(t, pod, "heart", ""), 100*time.Millisecond, harness.ContextField("hb", "heartbeat", "plan"), "a/b/c")

	b.Field("idle-1", ".state", "concluded: timeout")
	b.Field("r1", ".state", "concluded: conclusion")
	b.Field("r1a", ".state", "concluded: parent_concluded")
	b.Field("plan", ".state", "active")
	b.Field("task-1", ".state", "active")
	b.Field("a/b/c", ".state", "active")
	b.Field("a/b", ".state", "path prefix")
	b.Field("plan", ".type", "planning")
	b.Field("r1a", ".depth", "depth 4")
	b.Field("a/b/c", ".depth", "depth 3")
	b.ParentIs("task-1", "")
	b.ParentIs("plan", "task-1")
	b.ParentIs("r1", "plan")
	b.ParentIs("r1a", "r1")
	b.ParentIs("idle-1", "task-1")
	b.ParentIs("hb", "plan")
	b.ParentIs("a/b/c", "a/b")
	b.ParentIs("a/b", "a")
	b.ParentIs("a", "")
	b.WaitFor("r1a's level", harness.JSItem+`('r1a').getAttribute('aria-level') === '4'`, 5*time.Second)
	b.WaitFor("task-1's totals", harness.JSField+`('task-1', '.totals').startsWith('nested: 5 ctx · ')`, 10*time.Second)
	b.Field("r1", ".msgs", "2 msg")

	// The concluded subtree is folded; it unfolds and folds again.
	b.WaitFor("r1 folded", harness.JSItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+harness.JSShown+`('r1a')`, 10*time.Second)
	twisty := chromedp.Click(chromedp.CSS(`#tree [data-id="r1"] > .row .twisty`))
	b.Do("unfold r1", twisty)
	b.WaitFor("r1 unfolded", harness.JSItem+`('r1').getAttribute('aria-expanded') === 'true' && `+harness.JSShown+`('r1a')`, 5*time.Second)
	b.Do("fold r1", twisty)
	b.WaitFor("r1 folded again", harness.JSItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+harness.JSShown+`('r1a')`, 5*time.Second)

	// Live: a new context and more envelopes.
	late := harness.ContextField("late-1", "reasoning", "task-1")
	alice.Send(harness.TextEnv("reasoning/step", late, "late 1"))
	b.Field("late-1", ".msgs", "1 msg")
	b.ParentIs("late-1", "task-1")
	alice.Send(harness.TextEnv("reasoning/step", late, "late 2"))
	alice.Send(harness.TextEnv("reasoning/step", late, "late 3"))
	b.Field("late-1", ".msgs", "3 msg")
	b.WaitFor("task-1's totals with late-1", harness.JSField+`('task-1', '.totals').startsWith('nested: 6 ctx · ')`, 10*time.Second)

	// Clicking a node shows its envelopes (with its nested contexts').
	b.ClickItem("plan")
	b.WaitFor("plan's envelopes", `document.getElementById('view-title').textContent === 'plan' && `+harness.JSHasRow("planning step 1")+` && `+harness.JSHasRow("thinking")+` && `+harness.JSHasRow("r1 done"), 10*time.Second)
	b.ClickItem("r1")
	b.WaitFor("r1's envelopes", `document.getElementById('view-title').textContent === 'r1' && `+harness.JSHasRow("thinking")+` && `+harness.JSHasRow("r1 done")+` && `+harness.JSHasRow("concluded: conclusion")+` && !`+harness.JSHasRow("planning step 1"), 10*time.Second)
	b.ClickItem("late-1")
	alice.Send(harness.TextEnv("reasoning/step", late, "late 4, live"))
	b.WaitFor("late-1's live envelope", harness.JSHasRow("late 4, live"), 10*time.Second)
	b.ClickItem("")
	b.WaitFor("main's envelopes", `document.getElementById('view-title').textContent === 'main' && `+harness.JSHasRow("hello main")+` && !`+harness.JSHasRow("thinking"), 10*time.Second)

	// Participants follow presence.
	bob := g.Dial(t, pod, "bob", "")
	b.WaitFor("bob in the participants", `[...document.querySelectorAll('#participants .pid')].some(e => e.textContent === 'bob')`, 10*time.Second)
	_ = bob.Conn.Close()
	b.WaitFor("bob gone", `![...document.querySelectorAll('#participants .pid')].some(e => e.textContent === 'bob')`, 10*time.Second)
}

// TestViewerTreeKeyboard: the tree is a WAI-ARIA tree: arrows move, Right
// and Left unfold and fold (or go to the first child and the parent),
// Enter shows a context's envelopes, Home and End go to the ends.
func TestViewerTreeKeyboard(t *testing.T) {
	g := harness.StartGateway(t, nil)
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-keys"
	alice := g.Dial(t, pod, "alice", "")
	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	alice.Send(harness.TextEnv("task/start", harness.ContextField("task-1", "workflow", ""), "task started"))
	alice.Send(harness.TextEnv("plan/step", harness.ContextField("plan", "planning", "task-1"), "planning step 1"))
	alice.Send(harness.TextEnv("reasoning/step", harness.ContextField("r1", "reasoning", "plan"), "thinking"))
	alice.Send(harness.TextEnv("reasoning/step", harness.ContextField("r1a", "reasoning", "r1"), "sub-thought"))
	alice.Send(harness.TextEnv("conclusion", harness.ContextField("r1", "", ""), "r1 done"))
	alice.Send(harness.TextEnv("note", harness.ContextField("other", "notes", ""), "another root"))
	b.Field("r1", ".state", "concluded: conclusion")
	b.Field("other", ".msgs", "1 msg")

	b.WaitFor("a tree", `document.getElementById('tree').getAttribute('role') === 'tree' && document.querySelector('#tree [role=group]') !== null`, 5*time.Second)
	focused := func(want string) {
		t.Helper()
		b.WaitFor("focus on "+want, `(document.activeElement.dataset.id ?? (document.activeElement.dataset.main !== undefined ? 'main' : '?')) === `+harness.JS(want), 5*time.Second)
	}
	key := func(k string) {
		t.Helper()
		b.Do("key", chromedp.KeyEvent(k))
	}
	b.ClickItem("")
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
	b.WaitFor("r1 unfolded", harness.JSItem+`('r1').getAttribute('aria-expanded') === 'true' && `+harness.JSShown+`('r1a')`, 5*time.Second)
	focused("r1")
	key(kb.ArrowRight) // to the first child
	focused("r1a")
	key(kb.ArrowLeft) // a leaf: to the parent
	focused("r1")
	key(kb.ArrowLeft) // fold
	b.WaitFor("r1 folded", harness.JSItem+`('r1').getAttribute('aria-expanded') === 'false' && !`+harness.JSShown+`('r1a')`, 5*time.Second)
	key(kb.ArrowLeft)
	focused("plan")
	key(kb.Enter)
	b.WaitFor("plan selected", `document.getElementById('view-title').textContent === 'plan' && `+harness.JSItem+`('plan').getAttribute('aria-selected') === 'true' && `+harness.JSHasRow("planning step 1"), 5*time.Second)
	key(kb.End)
	focused("other")
	key(kb.Home)
	focused("main")
	key(" ")
	b.WaitFor("main selected", `document.getElementById('view-title').textContent === 'main'`, 5*time.Second)
}
