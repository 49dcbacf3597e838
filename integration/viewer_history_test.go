package integration

import (
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"

	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/gateway"
)

// These tests need the pod history of docs/protocol.md section 8 (history=,
// resume=, gateway/history and the welcome's history object).

// rowCount counts the envelope rows that contain text.
func rowCount(b *harness.Browser, text string) int {
	b.T.Helper()
	return harness.EvalJS[int](b, fmt.Sprintf(`%s().filter((t) => t.includes(%s)).length`, harness.JSRows, harness.JS(text)))
}

// TestViewerReconnects: when the connection drops, the page says it is
// reconnecting, comes back with backoff as the same participant, and shows
// what is sent after.
func TestViewerReconnects(t *testing.T) {
	g := harness.StartGateway(t, nil)
	proxy := gatewaytest.StartProxy(t, strings.TrimPrefix(g.URL, "http://"))
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-reconnect"
	alice := g.Dial(t, pod, "alice", "")
	b.Open(harness.ViewerURL(proxy.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	alice.Send(harness.TextEnv("chat", nil, "before the cut"))
	b.WaitFor("the first chat", harness.JSHasRow("before the cut"), 10*time.Second)
	b.RecordStatuses()

	if n := proxy.Cut(); n == 0 {
		t.Fatal("no connection to cut")
	}
	b.WaitFor("reconnecting, then live", `window.__statuses.some((s) => s.includes('reconnecting')) && `+harness.JSLive+` && document.getElementById('conn-note').textContent.includes('at ')`, 20*time.Second)
	alice.Send(harness.TextEnv("chat", nil, "after the cut"))
	b.WaitFor("the chat after the cut", harness.JSHasRow("after the cut"), 10*time.Second)
	if n := rowCount(b, "before the cut"); n != 1 {
		t.Errorf("the chat before the cut shows %d times, want once", n)
	}
	b.WaitFor("the same participant", `[...document.querySelectorAll('#participants li')].map(li => li.querySelector('.pid').textContent + (li.querySelector('.you') ? ' (you)' : '')).join('|') === 'watcher (you)|alice'`, 10*time.Second)
	t.Logf("statuses: %v; note: %s", harness.EvalJS[[]string](b, `window.__statuses`), harness.EvalJS[string](b, `document.getElementById('conn-note').textContent`))
}

// TestViewerResumes: a dropped connection resumes from the last envelope
// history keeps: what was sent while the page was away shows once, with no
// gap, and the page says "resumed". Needs history (docs/protocol.md section
// 8).
func TestViewerResumes(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
	proxy := gatewaytest.StartProxy(t, strings.TrimPrefix(g.URL, "http://"))
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-resume"
	alice := g.Dial(t, pod, "alice", "")
	b.Open(harness.ViewerURL(proxy.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	for i := range 3 {
		alice.Send(harness.TextEnv("chat", nil, fmt.Sprintf("before %d", i)))
	}
	// The last envelope the page gets is ephemeral: history does not keep
	// it, so the page must resume from the one before.
	alice.Send(map[string]any{"kind": "status", "payload": map[string]any{"text": "typing (ephemeral)"}, "lifecycle": map[string]any{"mode": "ephemeral"}})
	b.WaitFor("the chats", harness.JSHasRow("before 2")+` && `+harness.JSHasRow("typing (ephemeral)"), 10*time.Second)

	proxy.Refuse(true)
	proxy.Cut()
	b.WaitFor("the page to notice", `document.getElementById('status').textContent.includes('reconnecting')`, 10*time.Second)
	for i := range 5 {
		alice.Send(harness.TextEnv("chat", nil, fmt.Sprintf("missed %d", i)))
	}
	proxy.Refuse(false)
	b.WaitFor("live again", harness.JSLive+` && document.getElementById('conn-note').textContent.includes('at ')`, 30*time.Second)
	note := harness.EvalJS[string](b, `document.getElementById('conn-note').textContent`)
	if !strings.HasPrefix(note, "resumed at ") {
		t.Errorf("the page says %q, want resumed", note)
	}
	alice.Send(harness.TextEnv("chat", nil, "after"))
	b.WaitFor("the chat after", harness.JSHasRow("after"), 10*time.Second)
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
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 1000 })
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-replay"
	probe := g.Dial(t, pod, "probe", "")
	alice := g.Dial(t, pod, "alice", "")
	for i := range 3 {
		alice.Send(harness.TextEnv("chat", nil, fmt.Sprintf("early %d", i)))
	}
	done := harness.ContextField("done-1", "reasoning", "")
	for i := range 5 {
		alice.Send(harness.TextEnv("reasoning/step", done, fmt.Sprintf("done step %d", i)))
	}
	alice.Send(harness.TextEnv("conclusion", done, "done-1 concluded"))
	alice.Send(map[string]any{"id": "t-1", "kind": "activity", "payload": map[string]any{"text": "the full activity records"},
		"lifecycle": map[string]any{"mode": "transient", "summary": "15 activity records (page 1/9)"}})
	alice.Send(map[string]any{"kind": "digest", "payload": map[string]any{"text": "digest of t-1"},
		"lifecycle": map[string]any{"consumes": []string{"t-1"}}})
	live := harness.ContextField("live-1", "reasoning", "")
	alice.Send(harness.TextEnv("reasoning/step", live, "live step 0"))
	alice.Send(harness.TextEnv("reasoning/step", live, "live step 1"))
	alice.Send(harness.TextEnv("chat", nil, "last before the viewer"))
	// The viewer joins once all of that is in the pod's history.
	probe.WaitText("last before the viewer")

	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	b.WaitFor("the history note", `document.getElementById('history-note').textContent.includes('replayed')`, 10*time.Second)
	b.WaitFor("the main context's past", harness.JSHasRow("early 0")+` && `+harness.JSHasRow("early 2")+` && `+harness.JSHasRow("digest of t-1")+` && `+harness.JSHasRow("last before the viewer"), 10*time.Second)
	b.WaitFor("the collapsed transient envelope", `[...document.querySelectorAll('#envelopes > li.collapsed')].some((li) => li.textContent.includes('15 activity records (page 1/9)') && li.querySelector('.badge.collapsed'))`, 10*time.Second)
	if rowCount(b, "the full activity records") != 0 {
		t.Errorf("the consumed transient envelope shows its payload; history keeps only its summary")
	}
	b.Field("done-1", ".state", "concluded: conclusion")
	b.Field("done-1", ".msgs", "6 msg")
	b.Field("live-1", ".msgs", "2 msg")

	b.ClickItem("done-1")
	b.WaitFor("the folded context", `!document.getElementById('folded-note').hidden && document.getElementById('folded-text').textContent.startsWith('Folded') && `+harness.JSHasRow("done-1 concluded")+` && !`+harness.JSHasRow("done step 0"), 10*time.Second)
	b.Do("unfold", chromedp.Click(chromedp.CSS(`#unfold`)))
	b.WaitFor("the unfolded context", harness.JSHasRow("done step 0")+` && `+harness.JSHasRow("done step 4")+` && `+harness.JSHasRow("done-1 concluded"), 10*time.Second)

	b.ClickItem("live-1")
	b.WaitFor("the active context, whole", harness.JSHasRow("live step 0")+` && `+harness.JSHasRow("live step 1"), 10*time.Second)
}

// TestViewerLoadOlder: "load older" pages through gateway/history, in a
// context and in the main context, until the pod's first envelope. Needs
// history.
func TestViewerLoadOlder(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		c.Rate, c.Burst = 10000, 10000
		c.ContextRate, c.ContextBurst = 10000, 10000
	})
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	const pod = "viewer-older"
	probe := g.Dial(t, pod, "probe", "")
	alice := g.Dial(t, pod, "alice", "")
	for i := range 10 {
		alice.Send(harness.TextEnv("chat", nil, fmt.Sprintf("chat %d.", i)))
	}
	long := harness.ContextField("long", "reasoning", "")
	for i := range 300 {
		alice.Send(harness.TextEnv("reasoning/step", long, fmt.Sprintf("step %d.", i)))
	}
	probe.WaitText("step 299.")

	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)
	b.ClickItem("long")
	b.WaitFor("the newest step", harness.JSHasRow("step 299."), 10*time.Second)
	stepRows := `document.querySelectorAll('#envelopes > li').length`
	for range 20 {
		if harness.EvalJS[bool](b, harness.JSHasRow("step 0.")) {
			break
		}
		b.WaitFor("load older enabled", `!document.getElementById('load-older').disabled`, 10*time.Second)
		before := harness.EvalJS[int](b, stepRows)
		b.Do("load older", chromedp.Click(chromedp.CSS(`#load-older`)))
		b.WaitFor("older envelopes", fmt.Sprintf(`%s > %d || document.getElementById('load-older').disabled && document.getElementById('older-note').textContent !== 'loading…'`, stepRows, before), 10*time.Second)
	}
	rows := harness.EvalJS[[]string](b, harness.JSRows+`()`)
	if len(rows) != 300 {
		t.Errorf("long shows %d rows after loading older, want its 300 envelopes", len(rows))
	}
	for i, r := range rows {
		if want := fmt.Sprintf("step %d.", i); !strings.Contains(r, want) {
			t.Errorf("row %d is %q, want %q", i, r, want)
			break
		}
	}

	b.ClickItem("")
	b.Do("load older in main", chromedp.Click(chromedp.CSS(`#load-older`)))
	b.WaitFor("the main context's chats", harness.JSHasRow("chat 0.")+` && `+harness.JSHasRow("chat 9."), 15*time.Second)
}
