package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/gateway"
)

// These tests need the pod history of docs/protocol.md section 8 (history=,
// resume=, gateway/history and the welcome's history object).

// recordStatuses makes the page keep every text its status shows.
func (b *browser) recordStatuses() {
	b.t.Helper()
	b.do("record the statuses", evalVoid(`(() => {
		const s = document.getElementById('status');
		window.__statuses = [s.textContent];
		new MutationObserver(() => window.__statuses.push(s.textContent)).observe(s, {childList: true, characterData: true, subtree: true});
	})()`))
}

// waitText reads envelopes until one whose payload text is text.
func (c *client) waitText(text string) {
	c.t.Helper()
	for {
		m := c.expect()
		if s, _ := m.payload()["text"].(string); s == text {
			return
		}
	}
}

// rowCount counts the envelope rows that contain text.
func rowCount(b *browser, text string) int {
	b.t.Helper()
	return evalJS[int](b, fmt.Sprintf(`%s().filter((t) => t.includes(%s)).length`, jsRows, js(text)))
}

// TestViewerReconnects: when the connection drops, the page says it is
// reconnecting, comes back with backoff as the same participant, and shows
// what is sent after.
func TestViewerReconnects(t *testing.T) {
	g := startGateway(t, nil)
	proxy := startCutProxy(t, strings.TrimPrefix(g.URL, "http://"))
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-reconnect"
	alice := g.dial(t, pod, "alice", "")
	b.open(viewerURL(proxy.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	alice.send(ctxEnv("chat", nil, "before the cut"))
	b.waitFor("the first chat", jsHasRow("before the cut"), 10*time.Second)
	b.recordStatuses()

	if n := proxy.cut(); n == 0 {
		t.Fatal("no connection to cut")
	}
	b.waitFor("reconnecting, then live", `window.__statuses.some((s) => s.includes('reconnecting')) && `+jsLive+` && document.getElementById('conn-note').textContent.includes('at ')`, 20*time.Second)
	alice.send(ctxEnv("chat", nil, "after the cut"))
	b.waitFor("the chat after the cut", jsHasRow("after the cut"), 10*time.Second)
	if n := rowCount(b, "before the cut"); n != 1 {
		t.Errorf("the chat before the cut shows %d times, want once", n)
	}
	b.waitFor("the same participant", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'watcher (you)|alice'`, 10*time.Second)
	t.Logf("statuses: %v; note: %s", evalJS[[]string](b, `window.__statuses`), evalJS[string](b, `document.getElementById('conn-note').textContent`))
}

// TestViewerResumes: a dropped connection resumes from the last envelope
// history keeps: what was sent while the page was away shows once, with no
// gap, and the page says "resumed". Needs history (docs/protocol.md section
// 8).
func TestViewerResumes(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.History = 1000 })
	proxy := startCutProxy(t, strings.TrimPrefix(g.URL, "http://"))
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-resume"
	alice := g.dial(t, pod, "alice", "")
	b.open(viewerURL(proxy.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	for i := range 3 {
		alice.send(ctxEnv("chat", nil, fmt.Sprintf("before %d", i)))
	}
	// The last envelope the page gets is ephemeral: history does not keep
	// it, so the page must resume from the one before.
	alice.send(map[string]any{"kind": "status", "payload": map[string]any{"text": "typing (ephemeral)"}, "lifecycle": map[string]any{"mode": "ephemeral"}})
	b.waitFor("the chats", jsHasRow("before 2")+` && `+jsHasRow("typing (ephemeral)"), 10*time.Second)

	proxy.pause(true)
	proxy.cut()
	b.waitFor("the page to notice", `document.getElementById('status').textContent.includes('reconnecting')`, 10*time.Second)
	for i := range 5 {
		alice.send(ctxEnv("chat", nil, fmt.Sprintf("missed %d", i)))
	}
	proxy.pause(false)
	b.waitFor("live again", jsLive+` && document.getElementById('conn-note').textContent.includes('at ')`, 30*time.Second)
	note := evalJS[string](b, `document.getElementById('conn-note').textContent`)
	if !strings.HasPrefix(note, "resumed at ") {
		t.Errorf("the page says %q, want resumed", note)
	}
	alice.send(ctxEnv("chat", nil, "after"))
	b.waitFor("the chat after", jsHasRow("after"), 10*time.Second)
	for i := range 5 {
		if n := rowCount(b, fmt.Sprintf("missed %d", i)); n != 1 {
			t.Errorf("missed %d shows %d times, want once", i, n)
		}
	}
	for i := range 3 {
		if n := rowCount(b, fmt.Sprintf("before %d", i)); n != 1 {
			t.Errorf("before %d shows %d times, want once", i, n)
		}
	}
}

// TestViewerHistoryReplay: a viewer that joins late draws the past
// (history=): the main context's envelopes, a transient envelope that was
// consumed, shown collapsed with its summary, and a concluded context,
// folded to its conclusion, which unfolds on request. Needs history.
func TestViewerHistoryReplay(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.History = 1000 })
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-replay"
	probe := g.dial(t, pod, "probe", "")
	alice := g.dial(t, pod, "alice", "")
	for i := range 3 {
		alice.send(ctxEnv("chat", nil, fmt.Sprintf("early %d", i)))
	}
	done := objCtx("done-1", "reasoning", "")
	for i := range 5 {
		alice.send(ctxEnv("reasoning/step", done, fmt.Sprintf("done step %d", i)))
	}
	alice.send(ctxEnv("conclusion", done, "done-1 concluded"))
	alice.send(map[string]any{"id": "t-1", "kind": "activity", "payload": map[string]any{"text": "the full activity records"},
		"lifecycle": map[string]any{"mode": "transient", "summary": "15 activity records (page 1/9)"}})
	alice.send(map[string]any{"kind": "digest", "payload": map[string]any{"text": "digest of t-1"},
		"lifecycle": map[string]any{"consumes": []string{"t-1"}}})
	live := objCtx("live-1", "reasoning", "")
	alice.send(ctxEnv("reasoning/step", live, "live step 0"))
	alice.send(ctxEnv("reasoning/step", live, "live step 1"))
	alice.send(ctxEnv("chat", nil, "last before the viewer"))
	// The viewer joins once all of that is in the pod's history.
	probe.waitText("last before the viewer")

	b.open(viewerURL(g.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	b.waitFor("the history note", `document.getElementById('history-note').textContent.includes('replayed')`, 10*time.Second)
	b.waitFor("the main context's past", jsHasRow("early 0")+` && `+jsHasRow("early 2")+` && `+jsHasRow("digest of t-1")+` && `+jsHasRow("last before the viewer"), 10*time.Second)
	b.waitFor("the collapsed transient envelope", `[...document.querySelectorAll('#envelopes > li.collapsed')].some((li) => li.textContent.includes('15 activity records (page 1/9)') && li.querySelector('.badge.collapsed'))`, 10*time.Second)
	if rowCount(b, "the full activity records") != 0 {
		t.Errorf("the consumed transient envelope shows its payload; history keeps only its summary")
	}
	b.field("done-1", ".state", "concluded: conclusion")
	b.field("done-1", ".msgs", "6 msg")
	b.field("live-1", ".msgs", "2 msg")

	b.clickItem("done-1")
	b.waitFor("the folded context", `!document.getElementById('folded-note').hidden && document.getElementById('folded-text').textContent.startsWith('Folded') && `+jsHasRow("done-1 concluded")+` && !`+jsHasRow("done step 0"), 10*time.Second)
	b.do("unfold", chromedp.Click(chromedp.CSS(`#unfold`)))
	b.waitFor("the unfolded context", jsHasRow("done step 0")+` && `+jsHasRow("done step 4")+` && `+jsHasRow("done-1 concluded"), 10*time.Second)

	b.clickItem("live-1")
	b.waitFor("the active context, whole", jsHasRow("live step 0")+` && `+jsHasRow("live step 1"), 10*time.Second)
}

// TestViewerLoadOlder: "load older" pages through gateway/history, in a
// context and in the main context, until the pod's first envelope. Needs
// history.
func TestViewerLoadOlder(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) {
		c.History = 1000
		c.Rate, c.Burst = 10000, 10000
		c.ContextRate, c.ContextBurst = 10000, 10000
	})
	b := newBrowser(t, browserOpts{})
	const pod = "viewer-older"
	probe := g.dial(t, pod, "probe", "")
	alice := g.dial(t, pod, "alice", "")
	for i := range 10 {
		alice.send(ctxEnv("chat", nil, fmt.Sprintf("chat %d.", i)))
	}
	long := objCtx("long", "reasoning", "")
	for i := range 300 {
		alice.send(ctxEnv("reasoning/step", long, fmt.Sprintf("step %d.", i)))
	}
	probe.waitText("step 299.")

	b.open(viewerURL(g.URL, pod, "watcher"))
	b.waitFor("the viewer to be live", jsLive, 20*time.Second)
	b.clickItem("long")
	b.waitFor("the newest step", jsHasRow("step 299."), 10*time.Second)
	stepRows := `document.querySelectorAll('#envelopes > li').length`
	for range 20 {
		if evalJS[bool](b, jsHasRow("step 0.")) {
			break
		}
		b.waitFor("load older enabled", `!document.getElementById('load-older').disabled`, 10*time.Second)
		before := evalJS[int](b, stepRows)
		b.do("load older", chromedp.Click(chromedp.CSS(`#load-older`)))
		b.waitFor("older envelopes", fmt.Sprintf(`%s > %d || document.getElementById('load-older').disabled && document.getElementById('older-note').textContent !== 'loading…'`, stepRows, before), 10*time.Second)
	}
	rows := evalJS[[]string](b, jsRows+`()`)
	if len(rows) != 300 {
		t.Errorf("long shows %d rows after loading older, want its 300 envelopes", len(rows))
	}
	for i, r := range rows {
		if want := fmt.Sprintf("step %d.", i); !strings.Contains(r, want) {
			t.Errorf("row %d is %q, want %q", i, r, want)
			break
		}
	}

	b.clickItem("")
	b.do("load older in main", chromedp.Click(chromedp.CSS(`#load-older`)))
	b.waitFor("the main context's chats", jsHasRow("chat 0.")+` && `+jsHasRow("chat 9."), 15*time.Second)
}
