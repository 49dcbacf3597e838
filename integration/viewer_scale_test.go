package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestViewerThousandContexts: a pod opens 1,000 contexts over three levels
// (10 roots, 90 children, 900 grandchildren) as fast as one sender can; the
// test logs the time from the first envelope to all 1,000 nodes being in
// the page. Then the pod sends 200 envelopes a second for 3 seconds into
// them, and the test logs the page's longest frame meanwhile. There is no
// timed assertion: the figures go to BENCHMARKS.md.
func TestViewerThousandContexts(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 100000, 100000
		c.ContextCreateRate, c.ContextCreateBurst = 100000, 100000
		c.MaxContextsPerParticipant = 2000
		c.SendQueue = 8192
	})
	b := harness.NewBrowser(t, harness.BrowserOpts{Timeout: 3 * time.Minute})
	const pod = "viewer-scale"
	sender := g.Dial(t, pod, "loadgen", "")
	b.Open(harness.ViewerURL(g.URL, pod, "watcher"))
	b.WaitFor("the viewer to be live", harness.JSLive, 20*time.Second)

	var ids []string
	var envs [][]byte
	add := func(id, parent string) {
		ids = append(ids, id)
		envs = append(envs, harness.MustJSON(t, harness.TextEnv("open", harness.ContextField(id, "task", parent), "opened "+id)))
	}
	for r := range 10 {
		root := fmt.Sprintf("r%d", r)
		add(root, "")
		for c := range 9 {
			child := fmt.Sprintf("%s.c%d", root, c)
			add(child, root)
			for gc := range 10 {
				add(fmt.Sprintf("%s.g%d", child, gc), child)
			}
		}
	}
	if len(envs) != 1000 {
		t.Fatalf("built %d contexts", len(envs))
	}
	// The page notes when the first and the 1,000th node appear.
	b.Do("observe the tree", harness.EvalVoid(`(() => {
		const tree = document.getElementById('tree');
		window.__nodes = {};
		new MutationObserver(() => {
			const n = tree.querySelectorAll('[role=treeitem][data-id]').length;
			if (n > 0 && !window.__nodes.first) window.__nodes.first = performance.now();
			if (n >= 1000 && !window.__nodes.all) window.__nodes.all = performance.now();
		}).observe(tree, {childList: true, subtree: true});
	})()`))

	start := time.Now()
	for _, e := range envs {
		sender.SendRaw(e)
	}
	sent := time.Since(start)
	b.WaitFor("1,000 nodes", `document.querySelectorAll('#tree [role=treeitem][data-id]').length === 1000`, 2*time.Minute)
	drawn := time.Since(start)
	inPage := harness.EvalJS[float64](b, `window.__nodes.all - window.__nodes.first`)
	b.Field("r9.c8.g9", ".depth", "depth 3")
	b.WaitFor("r0's totals", harness.JSField+`('r0', '.totals').startsWith('nested: 99 ctx · 99 msg')`, 10*time.Second)
	t.Logf("1,000 contexts: first envelope to 1,000 nodes in the page: %v (sent in %v; in the page, first node to the 1,000th: %.0f ms)",
		drawn.Round(time.Millisecond), sent.Round(time.Millisecond), inPage)

	// 200 envelopes a second for 3 seconds, spread over the contexts, while
	// the page measures the gaps between its frames.
	b.Do("measure frames", harness.EvalVoid(`(() => {
		window.__frames = {max: 0, n: 0, last: performance.now(), on: true};
		const f = (now) => {
			const s = window.__frames;
			s.max = Math.max(s.max, now - s.last); s.n++; s.last = now;
			if (s.on) requestAnimationFrame(f);
		};
		requestAnimationFrame(f);
	})()`))
	const rate, seconds = 200, 3
	tick := time.NewTicker(time.Second / rate)
	for i := range rate * seconds {
		<-tick.C
		id := ids[(i*37)%len(ids)]
		sender.SendRaw(harness.MustJSON(t, harness.TextEnv("step", harness.ContextField(id, "", ""), fmt.Sprintf("step %d", i))))
	}
	tick.Stop()
	total := 1000 + rate*seconds
	b.WaitFor("every envelope counted", fmt.Sprintf(`[...document.querySelectorAll('#tree > [role=treeitem][data-id]')].reduce((sum, li) => {
		const own = parseInt(li.querySelector(':scope > .row .msgs').textContent);
		const nested = parseInt(li.querySelector(':scope > .row .totals').textContent.split(' · ')[1]);
		return sum + own + nested;
	}, 0) === %d`, total), time.Minute)
	type frames struct {
		Max float64 `json:"max"`
		N   int     `json:"n"`
	}
	f := harness.EvalJS[frames](b, `(() => { window.__frames.on = false; return window.__frames; })()`)
	t.Logf("%d envelopes a second for %d s into 1,000 contexts: every one counted in the tree; longest frame %.0f ms over %d frames",
		rate, seconds, f.Max, f.N)
}
