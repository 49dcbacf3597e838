package integration

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
	"io"
	"net"
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

// browser is one headless Chromium with one tab, and what the tab did:
// every request it made, and every uncaught exception of the page or
// violation of its Content-Security-Policy (each fails the test).
type browser struct {
	t   *testing.T
	ctx context.Context // the tab, with the test's deadline

	mu         sync.Mutex
	requests   []string
	exceptions []string
}

type browserOpts struct {
	width, height int
	timeout       time.Duration
}

// newBrowser starts Chromium for one test; the test's cleanup stops it and
// fails the test if the page threw an uncaught exception.
func newBrowser(t *testing.T, o browserOpts) *browser {
	t.Helper()
	ensureChromium(t)
	if o.width == 0 {
		o.width, o.height = 1280, 900
	}
	if o.timeout == 0 {
		o.timeout = 90 * time.Second
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
		chromedp.WindowSize(o.width, o.height),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	b := &browser{t: t}
	t.Cleanup(func() {
		cancelTab()
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
	// Start the browser with no deadline (the deadline would end it).
	if err := chromedp.Do(tabCtx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Listen(tabCtx, b.event); err != nil {
		t.Fatalf("listen to chromium: %v", err)
	}
	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(int64(o.width), int64(o.height))); err != nil {
		t.Fatalf("set the viewport: %v", err)
	}
	ctx, cancel := context.WithTimeout(tabCtx, o.timeout)
	t.Cleanup(cancel)
	b.ctx = ctx
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("the page threw: %s", e)
		}
	})
	return b
}

func (b *browser) event(ev any) {
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

func (b *browser) requestURLs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}

// do runs actions in the tab, failing the test on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.pageState())
	}
}

// open loads a page of the gateway.
func (b *browser) open(u string) {
	b.t.Helper()
	b.do("open "+u, chromedp.Navigate(u))
}

// eval evaluates a JavaScript expression in the page.
func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v\n%s", expr, err, b.pageState())
	}
	return v
}

// waitFor polls a JavaScript condition each frame until it holds.
func (b *browser) waitFor(what, cond string, d time.Duration) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(d)))
	if err != nil {
		b.t.Fatalf("waiting for %s (%s): %v\n%s", what, cond, err, b.pageState())
	}
}

// pageState is what the page shows, for a failure's message.
func (b *browser) pageState() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const t = (id) => { const e = document.getElementById(id); return e ? e.textContent.trim() : '(none)'; };
		return 'page: ' + location.href + '\nstatus: ' + t('status') + ' | note: ' + t('conn-note') +
			'\njoin error: ' + t('join-error') + '\nhistory: ' + t('history-note') +
			'\ntree: ' + [...document.querySelectorAll('#tree [role=treeitem]')].slice(0, 40).map(li => li.querySelector('.row').textContent).join(' | ') +
			'\nview: ' + t('view-title') + ', ' + document.querySelectorAll('#envelopes > li').length + ' rows; older: ' + t('older-note');
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

// js quotes a Go string as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Page queries shared by the tests, as JavaScript.
const (
	// jsItem finds the tree item of a context id.
	jsItem = `((id) => [...document.querySelectorAll('#tree [role=treeitem]')].find((li) => li.dataset.id === id))`
	// jsField reads a field of a context's row ('.state', '.msgs', …).
	jsField = `((id, sel) => { const li = ` + jsItem + `(id); const e = li && li.querySelector(':scope > .row ' + sel); return e ? e.textContent : null; })`
	// jsParent is the context id of a tree item's parent item.
	jsParent = `((id) => { const li = ` + jsItem + `(id); const p = li && li.parentElement.closest('[role=treeitem]'); return p ? (p.dataset.id ?? 'main') : null; })`
	// jsShown tells whether a context's item can be seen.
	jsShown = `((id) => { const li = ` + jsItem + `(id); return !!li && li.querySelector('.row').checkVisibility(); })`
	// jsRows is the text of every envelope row of the view.
	jsRows = `(() => [...document.querySelectorAll('#envelopes > li')].map((li) => li.textContent))`
	// jsLive tells whether the page is joined and live.
	jsLive = `(document.getElementById('status').textContent === 'live')`
)

func jsHasRow(text string) string {
	return fmt.Sprintf(`%s().some((t) => t.includes(%s))`, jsRows, js(text))
}

// clickItem clicks the label of a context's tree item (id "" is main).
func (b *browser) clickItem(id string) {
	b.t.Helper()
	sel := `#tree [data-main] > .row .cid`
	if id != "" {
		b.waitFor("tree item "+id, fmt.Sprintf(`%s(%s)`, jsShown, js(id)), 10*time.Second)
		sel = fmt.Sprintf(`#tree [data-id=%s] > .row .cid`, cssString(id))
	}
	b.do("click "+id, chromedp.Click(chromedp.CSS(sel)))
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

// viewerURL is the page's link to a pod (open mode, as participant id).
func viewerURL(base, pod, id string) string {
	q := url.Values{"pod": {pod}}
	if id != "" {
		q.Set("participant", id)
	}
	return base + "/?" + q.Encode()
}

// ctxEnv is an envelope in a context (ctx nil: the main context) with a
// text payload.
func ctxEnv(kind string, ctx any, text string) map[string]any {
	m := map[string]any{"kind": kind, "payload": map[string]any{"text": text}}
	if ctx != nil {
		m["context"] = ctx
	}
	return m
}

func objCtx(id, typ, parent string) map[string]any {
	m := map[string]any{"id": id}
	if typ != "" {
		m["type"] = typ
	}
	if parent != "" {
		m["parent"] = parent
	}
	return m
}

// cutProxy forwards TCP connections to a gateway and can cut them all at
// once, as a network that fails would: the page's connection drops
// without a closing handshake.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	paused bool
	URL    string
}

// pause makes the proxy close the connections it accepts, as an
// unreachable gateway would, until pause(false).
func (p *cutProxy) pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.mu.Unlock()
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, URL: "http://" + ln.Addr().String()}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if paused {
			_ = c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
		go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
	}
}

// cut closes every connection through the proxy.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	return n / 2
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// evalVoid runs JavaScript for its effect.
func evalVoid(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](expr)
}
