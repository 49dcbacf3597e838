package harness

// The pod viewer's tests drive the real page in a real headless Chromium
// (github.com/chromedp/chromedp) against a gateway served in process. They
// wait on what a person would see (the page's text, polled each frame),
// never on sleeps. Chromium is Debian's package: when /usr/bin/chromium is
// missing, the first viewer test installs it with apt-get (as root), so
// that `go test ./...` passes on a fresh machine with only Go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

var (
	chromiumOnce sync.Once
	chromiumErr  error
)

// ensureChromium installs Debian's chromium package once per test binary
// when it is missing.
func ensureChromium(t *testing.T) {
	t.Helper()
	chromiumOnce.Do(func() { chromiumErr = installChromium(t) })
	if chromiumErr != nil {
		t.Fatalf("the viewer tests need Chromium at %s: %v", chromiumPath, chromiumErr)
	}
}

func installChromium(t *testing.T) error {
	if _, err := os.Stat(chromiumPath); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("it is missing, and only root can install it: run `apt-get update && apt-get install -y chromium` as root")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("it is missing, and there is no apt-get to install it with: install Debian's (or Ubuntu's) chromium package")
	}
	t.Logf("%s is missing: installing Debian's chromium package (apt-get), once for this test binary", chromiumPath)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"update"}, {"install", "-y", "chromium"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			return fmt.Errorf("apt-get %s failed (%v); install the chromium package by hand:\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		return fmt.Errorf("apt-get installed chromium, but %s is still missing: %v", chromiumPath, err)
	}
	return nil
}

// Browser is one tab of a headless Chromium, and what the tab did: every
// request it made, and every uncaught exception of the page or violation
// of its Content-Security-Policy (each fails the test). NewBrowser starts
// Chromium with its first tab; Tab opens more in the same Chromium.
type Browser struct {
	T   *testing.T
	Ctx context.Context // the tab, with the test's deadline

	tab  context.Context // the tab without the deadline: Tab opens its siblings from it
	opts BrowserOpts

	mu         sync.Mutex
	requests   []string
	exceptions []string
}

type BrowserOpts struct {
	Width, Height int
	Timeout       time.Duration
}

// NewBrowser starts Chromium for one test; the test's cleanup stops it and
// fails the test if the page threw an uncaught exception.
func NewBrowser(t *testing.T, o BrowserOpts) *Browser {
	t.Helper()
	ensureChromium(t)
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	if o.Timeout == 0 {
		o.Timeout = 90 * time.Second
	}
	dir, err := os.MkdirTemp("", "mcpp-viewer-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		// This machine's network is closed: Chromium's own background
		// connections would only wait on it.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(o.Width, o.Height),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(func() {
		cancelAlloc()
		// Chromium's helpers can write in the directory for a moment after
		// the browser ends.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return openTab(t, allocCtx, o)
}

// Tab opens another tab in b's Chromium for t (a subtest, say), with its
// own session storage and record of what it did, the size and deadline of
// b's; t's cleanup closes it. Tests that share one Chromium spare its
// start, the slowest part of a short viewer test.
func (b *Browser) Tab(t *testing.T) *Browser {
	t.Helper()
	return openTab(t, b.tab, b.opts)
}

// openTab opens a tab in parent's Chromium (starting it, for the first),
// closed by t's cleanup.
func openTab(t *testing.T, parent context.Context, o BrowserOpts) *Browser {
	t.Helper()
	tabCtx, cancelTab := chromedp.NewContext(parent)
	t.Cleanup(cancelTab)
	b := &Browser{T: t, tab: tabCtx, opts: o}
	// Start the browser (or the tab) with no deadline (the deadline would
	// end it).
	if err := chromedp.Do(tabCtx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Listen(tabCtx, b.event); err != nil {
		t.Fatalf("listen to chromium: %v", err)
	}
	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(int64(o.Width), int64(o.Height))); err != nil {
		t.Fatalf("set the viewport: %v", err)
	}
	ctx, cancel := context.WithTimeout(tabCtx, o.Timeout)
	t.Cleanup(cancel)
	b.Ctx = ctx
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("the page threw: %s", e)
		}
	})
	return b
}

func (b *Browser) event(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
	case *network.EventWebSocketCreated:
		b.requests = append(b.requests, e.URL)
	case *runtime.EventExceptionThrown:
		b.exceptions = append(b.exceptions, (&chromedp.ExceptionError{ExceptionDetails: e.ExceptionDetails}).Error())
	case *cdplog.EventEntryAdded:
		// The page's own Content-Security-Policy must never block it.
		if e.Entry != nil && strings.Contains(e.Entry.Text, "Content Security Policy") {
			b.exceptions = append(b.exceptions, e.Entry.Text)
		}
	}
}

func (b *Browser) RequestURLs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// Do runs actions in the tab, failing the test on an error.
func (b *Browser) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.T.Helper()
	if err := chromedp.Do(b.Ctx, actions...); err != nil {
		b.T.Fatalf("%s: %v\n%s", what, err, b.pageState())
	}
}

// Open loads a page of the gateway.
func (b *Browser) Open(u string) {
	b.T.Helper()
	b.Do("open "+u, chromedp.Navigate(u))
}

// EvalJS evaluates a JavaScript expression in the page.
func EvalJS[T any](b *Browser, expr string) T {
	b.T.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.T.Fatalf("evaluate %s: %v\n%s", expr, err, b.pageState())
	}
	return v
}

// WaitFor polls a JavaScript condition each frame until it holds.
func (b *Browser) WaitFor(what, cond string, d time.Duration) {
	b.T.Helper()
	_, err := chromedp.Run(b.Ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(d)))
	if err != nil {
		b.T.Fatalf("waiting for %s (%s): %v\n%s", what, cond, err, b.pageState())
	}
}

// pageState is what the page shows, for a failure's message.
func (b *Browser) pageState() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.Ctx), 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const t = (id) => { const e = document.getElementById(id); return e ? e.textContent.trim() : '(none)'; };
		return 'page: ' + location.href + '\nstatus: ' + t('status') + ' | note: ' + t('conn-note') +
			'\njoin error: ' + t('join-error') + '\nhistory: ' + t('history-note') +
			'\ntree: ' + [...document.querySelectorAll('#tree [role=treeitem]')].slice(0, 40).map(li => li.querySelector('.row').textContent).join(' | ') +
			'\nview: ' + t('view-title') + ', ' + document.querySelectorAll('#envelopes > li').length + ' rows; older: ' + t('older-note') +
			'\nmode: ' + t('mode') + ' | participants: ' + t('participants') + ' | ' + t('participants-note') +
			'\nproposals: ' + [...document.querySelectorAll('#proposals > li, #ended > li')].map(li => li.dataset.id + ' [' + (li.querySelector('.p-state') || {}).textContent + '] ' + ((li.querySelector('.p-outcome') || {}).textContent || '')).join(' | ') +
			'\nsend: ' + t('send-label') + ' | ' + t('send-note');
	})()`))
	if err != nil {
		return "(page state unavailable: " + err.Error() + ")"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.exceptions) > 0 {
		s += "\nexceptions: " + strings.Join(b.exceptions, "\n")
	}
	return s
}

// JS quotes a Go string as a JavaScript string literal.
func JS(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Page queries shared by the tests, as JavaScript.
const (
	// JSItem finds the tree item of a context id.
	JSItem = `((id) => [...document.querySelectorAll('#tree [role=treeitem]')].find((li) => li.dataset.id === id))`
	// JSField reads a field of a context's row ('.state', '.msgs', …).
	JSField = `((id, sel) => { const li = ` + JSItem + `(id); const e = li && li.querySelector(':scope > .row ' + sel); return e ? e.textContent : null; })`
	// jsParent is the context id of a tree item's parent item.
	jsParent = `((id) => { const li = ` + JSItem + `(id); const p = li && li.parentElement.closest('[role=treeitem]'); return p ? (p.dataset.id ?? 'main') : null; })`
	// JSShown tells whether a context's item can be seen.
	JSShown = `((id) => { const li = ` + JSItem + `(id); return !!li && li.querySelector('.row').checkVisibility(); })`
	// JSRows is the text of every envelope row of the view.
	JSRows = `(() => [...document.querySelectorAll('#envelopes > li')].map((li) => li.textContent))`
	// JSLive tells whether the page is joined and live.
	JSLive = `(document.getElementById('status').textContent === 'live')`
)

func JSHasRow(text string) string {
	return fmt.Sprintf(`%s().some((t) => t.includes(%s))`, JSRows, JS(text))
}

// ClickItem clicks the label of a context's tree item (id "" is main).
func (b *Browser) ClickItem(id string) {
	b.T.Helper()
	sel := `#tree [data-main] > .row .cid`
	if id != "" {
		b.WaitFor("tree item "+id, fmt.Sprintf(`%s(%s)`, JSShown, JS(id)), 10*time.Second)
		sel = fmt.Sprintf(`#tree [data-id=%s] > .row .cid`, cssString(id))
	}
	b.Do("click "+id, chromedp.Click(chromedp.CSS(sel)))
}

// cssString quotes s for a CSS attribute selector.
func cssString(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&sb, "\\%x ", r)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// ViewerURL is the page's link to a pod (open mode, as participant id).
func ViewerURL(base, pod, id string) string {
	q := url.Values{"pod": {pod}}
	if id != "" {
		q.Set("participant", id)
	}
	return base + "/?" + q.Encode()
}

// TextEnv is an envelope in a context (ctx nil: the main context) with a
// text payload.
func TextEnv(kind string, ctx any, text string) map[string]any {
	m := map[string]any{"kind": kind, "payload": map[string]any{"text": text}}
	if ctx != nil {
		m["context"] = ctx
	}
	return m
}

func MustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// EvalVoid runs JavaScript for its effect.
func EvalVoid(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](expr)
}

// SubmitJoin fills the join form and sends it.
func (b *Browser) SubmitJoin(pod, participant, token string) {
	b.T.Helper()
	b.Do("fill the join form",
		chromedp.WaitVisible(chromedp.CSS(`#join-form`)),
		EvalVoid(fmt.Sprintf(`document.getElementById('pod').value = %s; document.getElementById('participant').value = %s; document.getElementById('token').value = %s`,
			JS(pod), JS(participant), JS(token))),
		chromedp.Click(chromedp.CSS(`#join-form button[type=submit]`)),
	)
}

// JoinError waits for the join form's message to contain every part.
func (b *Browser) JoinError(parts ...string) {
	b.T.Helper()
	cond := `!document.getElementById('join').hidden && !document.getElementById('join-error').hidden`
	for _, p := range parts {
		cond += fmt.Sprintf(` && document.getElementById('join-error').textContent.includes(%s)`, JS(p))
	}
	b.WaitFor("the message "+strings.Join(parts, ", "), cond, 15*time.Second)
}

// ParentIs checks where a context hangs in the tree ("" is the root).
func (b *Browser) ParentIs(id, parent string) {
	b.T.Helper()
	want := "null"
	if parent != "" {
		want = JS(parent)
	}
	b.WaitFor(fmt.Sprintf("%s under %q", id, parent), fmt.Sprintf(`%s(%s) === %s`, jsParent, JS(id), want), 15*time.Second)
}

// Field waits until a context's row shows want in the field sel.
func (b *Browser) Field(id, sel, want string) {
	b.T.Helper()
	b.WaitFor(fmt.Sprintf("%s %s to be %q", id, sel, want), fmt.Sprintf(`%s(%s, %s) === %s`, JSField, JS(id), JS(sel), JS(want)), 15*time.Second)
}

// RecordStatuses makes the page keep every text its status shows.
func (b *Browser) RecordStatuses() {
	b.T.Helper()
	b.Do("record the statuses", EvalVoid(`(() => {
		const s = document.getElementById('status');
		window.__statuses = [s.textContent];
		new MutationObserver(() => window.__statuses.push(s.textContent)).observe(s, {childList: true, characterData: true, subtree: true});
	})()`))
}

// The viewer as a console (issue 30): its proposals, participants and
// send box, as JavaScript and CSS.
const (
	// JSProposal finds a proposal's card, pending or ended.
	JSProposal = `((id) => [...document.querySelectorAll('#proposals > li, #ended > li')].find((li) => li.dataset.id === id))`
	// JSPending is the ids of the pending proposals' cards, in order.
	JSPending = `(() => [...document.querySelectorAll('#proposals > li')].map((li) => li.dataset.id))`
	// JSMode is how the page says it is in the pod: "observing" or
	// "present".
	JSMode = `document.getElementById('mode').textContent`
)

// JSCardText is the text of a part of a proposal's card (part a CSS
// selector inside it, "" the whole card), or null when it has none.
func JSCardText(id, part string) string {
	if part == "" {
		return fmt.Sprintf(`((li) => li ? li.textContent : null)(%s(%s))`, JSProposal, JS(id))
	}
	return fmt.Sprintf(`((li) => { const e = li && li.querySelector(%s); return e ? e.textContent : null; })(%s(%s))`, JS(part), JSProposal, JS(id))
}

// ProposalPart is the CSS selector of a part of a proposal's card ("" the
// card itself).
func ProposalPart(id, part string) string {
	return strings.TrimSpace("li.proposal[data-id=" + cssString(id) + "] " + part)
}

// ParticipantPart is the CSS selector of a part of a participant's entry
// ("" the entry itself).
func ParticipantPart(id, part string) string {
	return strings.TrimSpace("#participants li[data-id=" + cssString(id) + "] " + part)
}

// Click clicks what sel matches, once it can be seen.
func (b *Browser) Click(what, sel string) {
	b.T.Helper()
	b.Do(what, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// Type types text into the field sel, key by key, as a person does.
func (b *Browser) Type(what, sel, text string) {
	b.T.Helper()
	b.Do(what, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Clear(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), text))
}
