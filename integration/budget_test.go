package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// Issue 24: a pod's memory sized for a prompt (docs/protocol.md sections
// 8 and 9).

// budgetPod fills a pod with 1,000 envelopes: main-context chat, and 20
// tasks, each with a reasoning sub-context; the reasoning of every task
// concludes, and every other task concludes too. It returns the ids of
// the concluded contexts.
func budgetPod(t *testing.T, g *harness.Gateway, pod string) map[string]bool {
	t.Helper()
	alice := g.Dial(t, pod, "alice", "echo=1")
	rng := rand.New(rand.NewPCG(24, 1))
	words := strings.Fields("the agent reads a file then plans the next step and asks the tool for data about 42 items " +
		"results were ok but latency 1.5s is high; retry with backoff, JSON {\"k\": [1,2,3]} überprüfen 検証 done")
	text := func() string {
		n := 3 + rng.IntN(60)
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	concluded := map[string]bool{}
	var envs []any
	n := 0
	add := func(kind string, ctx map[string]any) {
		n++
		e := map[string]any{"id": fmt.Sprintf("e%04d", n), "kind": kind, "payload": map[string]any{"text": text()}}
		if ctx != nil {
			e["context"] = ctx
		}
		envs = append(envs, e)
	}
	for task := range 20 {
		tid := fmt.Sprintf("task-%02d", task)
		rid := tid + "-reasoning"
		tctx := map[string]any{"id": tid, "type": "task"}
		rctx := map[string]any{"id": rid, "type": "reasoning", "parent": tid}
		for range 10 {
			add("chat", nil)
		}
		add("context/branch", tctx)
		add("context/branch", rctx)
		for range 15 {
			add("reasoning/step", rctx)
		}
		add("conclusion", rctx)
		concluded[rid] = true
		for range 8 {
			add("chat", tctx)
		}
		if task%2 == 0 {
			add("conclusion", tctx)
			concluded[tid] = true
		}
	}
	for n < 1000 {
		add("chat", nil)
	}
	for i := 0; i < len(envs); i += 100 {
		histSendSeen(alice, envs[i:min(i+100, len(envs))]...)
	}
	return concluded
}

// replayRaw reads the replay that c's welcome announces, as the bytes
// of each envelope (c joined without batch=1: one envelope a message).
func replayRaw(t *testing.T, c *harness.Client) [][]byte {
	t.Helper()
	n := int(histInfo(c)["replayed"].(float64))
	<-c.Raw // the welcome
	out := make([][]byte, 0, n)
	for range n {
		select {
		case b := <-c.Raw:
			out = append(out, b)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: %d of %d replayed envelopes within 10s", c.ID, len(out), n)
		}
	}
	for range n {
		c.NextOf() // the same, decoded
	}
	return out
}

// labelOf is a replayed envelope's label: its id, or ev:CONTEXT for a
// system/context event.
func labelOf(t *testing.T, raw []byte) (label, kind, context string) {
	t.Helper()
	var m harness.Msg
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return histLabel(m), m.Kind(), m.ContextID()
}

// folded is the pod's whole folded history as a joiner with no budget
// would get it: its labels and each one's tokens.
func folded(t *testing.T, g *harness.Gateway, pod string) ([]string, []int) {
	t.Helper()
	c := g.Dial(t, pod, "reader-all", "history=all")
	var labels []string
	var tokens []int
	for _, raw := range replayRaw(t, c) {
		l, _, _ := labelOf(t, raw)
		labels = append(labels, l)
		tokens = append(tokens, envelope.EstimateTokens(raw))
	}
	return labels, tokens
}

// TestHistoryTokenBudget: a joiner with history=tokens:2000 gets the
// newest contiguous stretch of the pod's folded history that fits 2,000
// tokens: concluded contexts as their conclusions, the oldest entries
// left out first, omitted exact, the same for every joiner; paging back
// with gateway/history and max_tokens finds the rest, and /mcp answers
// the same.
func TestHistoryTokenBudget(t *testing.T) {
	t.Parallel()
	g := histOn(t, func(c *gateway.Config) {
		c.History = 5000
		c.Rate, c.Burst = 100000, 100000
		c.ContextCreateRate, c.ContextCreateBurst = 1000, 1000
	})
	const pod = "budget"
	concluded := budgetPod(t, g, pod)
	all, allTokens := folded(t, g, pod)
	if len(all) >= 1000 {
		t.Fatalf("the folded history holds %d entries: nothing was folded", len(all))
	}

	const budget = 2000
	bob := g.Dial(t, pod, "bob", fmt.Sprintf("history=tokens:%d", budget))
	info := histInfo(bob)
	raws := replayRaw(t, bob)
	sum := 0
	var got []string
	firstID := ""
	for i, raw := range raws {
		l, kind, ctx := labelOf(t, raw)
		got = append(got, l)
		if i == 0 {
			var m harness.Msg
			_ = json.Unmarshal(raw, &m)
			firstID = m.Str("id")
		}
		sum += envelope.EstimateTokens(raw)
		if concluded[ctx] && kind != "conclusion" && kind != "system/context" {
			t.Errorf("%s (%s in concluded context %s) was replayed: a concluded context shows only its conclusion", l, kind, ctx)
		}
	}
	replayed := len(raws)
	if replayed == 0 || info["tokens"] != float64(sum) || sum > budget {
		t.Fatalf("welcome history %v; the replay's estimate adds up to %d (budget %d)", info, sum, budget)
	}
	// The newest stretch: the tail of the folded history, in order, and
	// the entry before it would not have fitted.
	if !slices.Equal(got, all[len(all)-replayed:]) {
		t.Fatalf("the replay is not the newest stretch of the folded history:\n got  %v\n want %v", got, all[len(all)-replayed:])
	}
	omitted := len(all) - replayed
	if info["omitted"] != float64(omitted) || info["replayed"] != float64(replayed) {
		t.Fatalf("welcome history %v, want replayed %d and omitted %d", info, replayed, omitted)
	}
	if next := allTokens[omitted-1]; sum+next <= budget {
		t.Fatalf("the replay stopped at %d tokens, but the next envelope (%d tokens) would have fitted in %d", sum, next, budget)
	}
	rawTokens := 0
	raws = replayRaw(t, g.Dial(t, pod, "reader-raw", "history=all&fold=0"))
	for _, raw := range raws {
		rawTokens += envelope.EstimateTokens(raw)
	}
	t.Logf("1,000 envelopes: raw history %d entries, %d tokens; folded %d entries, %d tokens; history=tokens:%d replayed %d entries (%d tokens), omitted %d",
		len(raws), rawTokens, len(all), total(allTokens), budget, replayed, sum, omitted)
	if rawTokens <= total(allTokens) {
		t.Fatalf("folding saved nothing: raw %d tokens, folded %d", rawTokens, total(allTokens))
	}

	// Every joiner at the same moment gets the same.
	carol := g.Dial(t, pod, "carol", fmt.Sprintf("history=tokens:%d", budget))
	var again []string
	for _, raw := range replayRaw(t, carol) {
		l, _, _ := labelOf(t, raw)
		again = append(again, l)
	}
	if !slices.Equal(again, got) {
		t.Fatalf("two joiners got different replays:\n%v\n%v", got, again)
	}

	// Paging back finds exactly what was left out, each page within the
	// budget.
	before := firstID
	var back []string
	for page := 0; before != ""; page++ {
		bob.Send(map[string]any{"id": fmt.Sprintf("h%d", page), "kind": "gateway/history", "payload": map[string]any{"before": before, "max_tokens": budget, "limit": 1000}})
		ans := bob.NextNonPresence(5 * time.Second)
		if ans == nil || ans.Kind() != "system/history" {
			t.Fatalf("page %d: %v, want system/history", page, ans)
		}
		envs, _ := ans.Payload()["envelopes"].([]any)
		if tok := ans.Payload()["tokens"].(float64); tok > budget || (len(envs) == 0 && ans.Payload()["more"] == true) {
			t.Fatalf("page %d: %v tokens, %d envelopes, more %v", page, tok, len(envs), ans.Payload()["more"])
		}
		var labels []string
		for _, e := range envs {
			labels = append(labels, histLabel(e.(map[string]any)))
		}
		back = append(labels, back...)
		before = ""
		if ans.Payload()["more"] == true {
			before = envs[0].(map[string]any)["id"].(string)
		}
	}
	if !slices.Equal(back, all[:omitted]) {
		t.Fatalf("paging back found %d entries, want the %d omitted:\n got  %v\n want %v", len(back), omitted, back, all[:omitted])
	}

	// The same through /mcp, with the official SDK's client.
	cs := harness.MCPConnect(t, g.URL, pod, "dave", harness.MCPOpts{})
	res := harness.MCPOK(t, cs, "pod_history", map[string]any{"max_tokens": budget, "limit": 1000})
	var viaMCP []string
	for _, e := range res.Envelopes() {
		viaMCP = append(viaMCP, histLabel(e))
	}
	if !slices.Equal(viaMCP, got) || res.Out["tokens"] != float64(sum) {
		t.Fatalf("pod_history with max_tokens %d: %d envelopes, %v tokens, want the replay's %d and %d", budget, len(viaMCP), res.Out["tokens"], len(got), sum)
	}
	res = harness.MCPOK(t, cs, "pod_history", map[string]any{"max_tokens": budget, "limit": 1000, "before": firstID})
	if n := len(res.Envelopes()); n == 0 || res.Out["tokens"].(float64) > budget || histLabel(res.Envelopes()[n-1]) != all[omitted-1] {
		t.Fatalf("pod_history before %s: %v", firstID, res.Out)
	}
	// pod_read with max_tokens: what arrives next, within the budget.
	alice := g.Dial(t, pod, "alice2", "")
	for i := range 5 {
		alice.Send(map[string]any{"id": fmt.Sprintf("new-%d", i), "kind": "chat", "payload": map[string]any{"text": strings.Repeat("word ", 40)}})
	}
	harness.Eventually(t, 5*time.Second, "the five new envelopes", func() bool {
		r := harness.MCPOK(t, cs, "pod_history", map[string]any{"limit": 5})
		e := r.Envelopes()
		return len(e) == 5 && histLabel(e[4]) == "new-4"
	})
	read := harness.MCPOK(t, cs, "pod_read", map[string]any{"max_tokens": 120})
	if n := len(read.Envelopes()); n == 0 || n == 5 || read.Out["tokens"].(float64) > 120 || read.Out["more"] != true {
		t.Fatalf("pod_read with max_tokens 120 over five envelopes of about 45 tokens: %v", read.Out)
	}
}

func total(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// TestMCPInboxNotification: an MCP host subscribed to its inbox is told
// (notifications/resources/updated) within 100 ms of an envelope
// addressed to it being sent over WebSocket, and when a context it sent
// in concludes; a broadcast does not wake it. Reading the inbox returns
// what was addressed to it.
func TestMCPInboxNotification(t *testing.T) {
	t.Parallel()
	g := mcpGateway(t, nil)
	const pod = "inbox-lab"
	alice := g.Dial(t, pod, "alice", "")

	updates := make(chan string, 64)
	client := mcp.NewClient(&mcp.Implementation{Name: "inbox-test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			updates <- r.Params.URI
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.URL + "/mcp?pod=" + pod + "&participant=bob@host", MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: harness.MCPSessions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	alice.AwaitPresence("join", "bob@host", 5*time.Second)

	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != "mcpp://pods/{pod}/inbox/{participant}" {
		t.Fatalf("resource templates %v, %v", templates, err)
	}
	const inbox = "mcpp://pods/inbox-lab/inbox/bob%40host"
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "mcpp://pods/inbox-lab/inbox/alice"}); err == nil {
		t.Fatal("bob subscribed to alice's inbox")
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: inbox}); err != nil {
		t.Fatal(err)
	}

	var waits []time.Duration
	for i := range 5 {
		start := time.Now()
		alice.Send(map[string]any{"id": fmt.Sprintf("q%d", i), "kind": "chat", "to": []string{"bob@host"}, "payload": map[string]any{"text": "bob, a question"}})
		select {
		case uri := <-updates:
			waits = append(waits, time.Since(start))
			if uri != inbox {
				t.Fatalf("notified of %q, want %q", uri, inbox)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notification within 5s of envelope %d addressed to bob", i)
		}
		time.Sleep(20 * time.Millisecond) // one notification each
	}
	slices.Sort(waits)
	t.Logf("notified after %v", waits)
	if waits[len(waits)/2] > 100*time.Millisecond {
		t.Fatalf("the median notification came %v after the send, want within 100 ms (all: %v)", waits[len(waits)/2], waits)
	}

	// A broadcast wakes nobody.
	alice.Send(map[string]any{"id": "all", "kind": "chat", "payload": map[string]any{"text": "everyone"}})
	select {
	case uri := <-updates:
		t.Fatalf("a broadcast notified %q", uri)
	case <-time.After(300 * time.Millisecond):
	}

	// A context bob sent in concludes.
	harness.MCPOK(t, cs, "pod_send", map[string]any{"kind": "step", "context": map[string]any{"id": "work", "type": "task"}, "payload": map[string]any{}})
	alice.Send(map[string]any{"id": "done", "kind": "conclusion", "context": "work", "payload": map[string]any{"summary": "done"}})
	select {
	case <-updates:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification when a context bob sent in concluded")
	}

	// The inbox holds what was addressed to bob.
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: inbox})
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("reading the inbox: %v %v", res, err)
	}
	var body struct {
		Envelopes []harness.Msg `json:"envelopes"`
	}
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &body); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range body.Envelopes {
		ids = append(ids, e.Str("id"))
	}
	if !slices.Equal(ids, []string{"q0", "q1", "q2", "q3", "q4"}) {
		t.Fatalf("the inbox holds %v", ids)
	}
}
