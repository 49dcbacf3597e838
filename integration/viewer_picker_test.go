package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestViewerPodPicker (issue 37): the join form lists the pods an
// operator's token reaches (the operator's API, the token in the
// Authorization header), to pick from; any other token lists nothing, and
// the pod field stays a plain text field.
func TestViewerPodPicker(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Tokens = harness.WriteFile(t, "tokens.json", adminTokens)
	})
	g.DialToken(t, "vpick-lab", "bob-t", true, "")
	g.DialToken(t, "vpick-two", "carol-t", true, "")
	g.DialToken(t, "vpick-two", "mod-t", true, "")
	b := harness.NewBrowser(t, harness.BrowserOpts{})
	b.Open(g.URL + "/")
	b.WaitFor("the join form", `!document.getElementById('join').hidden`, 15*time.Second)
	const buttons = `[...document.querySelectorAll('#pod-pick button')].map((b) => b.dataset.pod + ' ' + b.textContent).join('|')`
	if harness.EvalJS[bool](b, `!document.getElementById('pod-pick').hidden`) {
		t.Fatal("the picker shows pods before any token")
	}

	typeToken(b, "ops-t")
	b.WaitFor("the operator's pods", buttons+` === 'vpick-lab vpick-lab 1 member|vpick-two vpick-two 2 members'`, 15*time.Second)
	if opts := harness.EvalJS[[]string](b, `[...document.querySelectorAll('#pod-list option')].map((o) => o.value)`); !slices.Equal(opts, []string{"vpick-lab", "vpick-two"}) {
		t.Fatalf("the pod field's suggestions: %v", opts)
	}
	b.Click("vpick-two", `#pod-pick button[data-pod="vpick-two"]`)
	if v := harness.EvalJS[string](b, `document.getElementById('pod').value`); v != "vpick-two" {
		t.Fatalf("the pod field after picking vpick-two: %q", v)
	}

	// A participant's token, and "*": nothing new to pick from (each
	// after the operator's, so that the list has something to lose).
	for _, tok := range []string{"bob-t", "mod-t"} {
		typeToken(b, "ops-t")
		b.WaitFor("the operator's pods again", buttons+` !== ''`, 15*time.Second)
		typeToken(b, tok)
		b.WaitFor("no pod to pick with "+tok, `document.getElementById('pod-pick').hidden && document.getElementById('pod-pick-note').hidden && document.querySelectorAll('#pod-list option').length === 0`, 15*time.Second)
	}
	for _, u := range b.RequestURLs() {
		if strings.Contains(u, "ops-t") || strings.Contains(u, "bob-t") || strings.Contains(u, "mod-t") {
			t.Errorf("a request carried a token in its address: %s", u)
		}
	}
}

// typeToken types token into the join form's token field, key by key, in
// place of what it held (chromedp.Clear leaves a password field as it
// is).
func typeToken(b *harness.Browser, token string) {
	b.T.Helper()
	b.Do("type the token "+token, chromedp.WaitVisible(chromedp.CSS(`#token`)),
		harness.EvalVoid(`document.getElementById('token').value = ''`),
		chromedp.SendKeys(chromedp.CSS(`#token`), token))
	b.WaitFor("the token typed", fmt.Sprintf(`document.getElementById('token').value === %s`, harness.JS(token)), 5*time.Second)
}
