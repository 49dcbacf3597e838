package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The tests of the pod's history (docs/protocol.md section 8, and
// gateway/history of section 6) against the real gateway, JetStream and
// WebSockets. Every test chooses history itself, so that they pass whatever
// MCPP_TEST_HISTORY says.

// histOn starts a gateway with history on (--history 1000 unless edit
// says otherwise).
func histOn(t *testing.T, edit func(*gateway.Config)) *harness.Gateway {
	t.Helper()
	return harness.StartGateway(t, func(c *gateway.Config) {
		c.History = 1000
		if edit != nil {
			edit(c)
		}
	})
}

// histLabel names a received envelope: its id, or "ev:CONTEXT" for a
// system/context event.
func histLabel(m harness.Msg) string {
	if m.Kind() == "system/context" {
		return "ev:" + m.ContextID()
	}
	return m.Str("id")
}

func histLabels(ms []harness.Msg) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, histLabel(m))
	}
	return out
}

// histEq fails the test when got is not want.
func histEq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s:\n got  %v\n want %v", what, got, want)
	}
}

// histBytes is an envelope as sent: a map, a string or bytes.
func histBytes(t *testing.T, e any) []byte {
	t.Helper()
	switch v := e.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// histSendSeen sends envelopes from c, which joined with echo=1, and
// waits until the last one comes back to it: the fan-out applies a frame
// to the pod's history before it delivers it, so the history then holds
// every one. A system/error fails the test.
func histSendSeen(c *harness.Client, envs ...any) {
	c.T.Helper()
	last := ""
	for _, e := range envs {
		b := histBytes(c.T, e)
		if last = gjson.GetBytes(b, "id").String(); last == "" {
			c.T.Fatalf("histSendSeen needs envelopes with ids: %s", b)
		}
		c.SendRaw(b)
	}
	for {
		m := c.NextOf()
		if m.Kind() == "system/error" {
			c.T.Fatalf("%s: an envelope was refused: %v", c.ID, m)
		}
		if m.Kind() != "system/context" && m.Str("id") == last {
			return
		}
	}
}

// histAwaitEvent reads c until the system/context event of ctx.
func histAwaitEvent(c *harness.Client, ctx string) harness.Msg {
	c.T.Helper()
	for {
		m := c.NextOf()
		if m.Kind() == "system/error" {
			c.T.Fatalf("%s: %v", c.ID, m)
		}
		if m.Kind() == "system/context" && m.ContextID() == ctx {
			return m
		}
	}
}

// histInfo is the welcome's history object (nil without one).
func histInfo(c *harness.Client) map[string]any {
	info, _ := c.Welcome.Payload()["history"].(map[string]any)
	return info
}

// histJoin joins and reads the replay its welcome announces.
func histJoin(t *testing.T, g *harness.Gateway, pod, id, query string) (*harness.Client, map[string]any, []harness.Msg) {
	t.Helper()
	c := g.Dial(t, pod, id, query)
	return c, histInfo(c), histReadReplay(c)
}

// histDialQ joins with exactly this query (for topic=, which dial cannot
// express) and reads the replay.
func histDialQ(t *testing.T, g *harness.Gateway, q url.Values) (*harness.Client, map[string]any, []harness.Msg) {
	t.Helper()
	conn, resp, err := harness.DialWebSocket(g.WS, q, nil)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
		}
		t.Fatalf("dial %v: %v %s", q, err, body)
	}
	c := harness.StartClient(t, harness.WebSocketConn{WS: conn}, true)
	return c, histInfo(c), histReadReplay(c)
}

func histReadReplay(c *harness.Client) []harness.Msg {
	c.T.Helper()
	n := 0
	if f, ok := histInfo(c)["replayed"].(float64); ok {
		n = int(f)
	}
	out := []harness.Msg{}
	for i := 0; i < n; i++ {
		out = append(out, c.NextOf())
	}
	return out
}

// histWantInfo checks the welcome's history object exactly.
func histWantInfo(t *testing.T, who string, got map[string]any, want map[string]any) {
	t.Helper()
	if !harness.JSONEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s: the welcome's history is %s, want %s", who, g, w)
	}
}

// histLive has sender (joined with echo=1) send one more envelope: each
// receiver's next envelope must be it, so nothing more was replayed and
// nothing came twice, and live delivery goes on after the replay.
func histLive(t *testing.T, sender *harness.Client, id string, receivers ...*harness.Client) {
	t.Helper()
	histSendSeen(sender, map[string]any{"id": id, "kind": "chat", "payload": map[string]any{"text": id}})
	for _, r := range receivers {
		if m := r.NextOf(); m.Str("id") != id {
			t.Fatalf("%s: got %s (%v), want the live envelope %s next", r.ID, histLabel(m), m, id)
		}
	}
}

// histRawOf scans c's raw messages (one envelope each: the client does
// not batch) for the one with this id, skipping older ones.
func histRawOf(c *harness.Client, id string) []byte {
	c.T.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case b := <-c.Raw:
			if gjson.GetBytes(b, "id").String() == id {
				return b
			}
		case <-deadline:
			c.T.Fatalf("%s: no raw message with id %q", c.ID, id)
			return nil
		}
	}
}

// histAsk sends gateway/history (payload nil: none) and returns the
// answer correlated to it: system/history or system/error.
func histAsk(c *harness.Client, id string, payload any) harness.Msg {
	c.T.Helper()
	env := map[string]any{"id": id, "kind": "gateway/history"}
	if payload != nil {
		env["payload"] = payload
	}
	c.Send(env)
	m := c.NextOf()
	if m.Str("correlation_id") != id {
		c.T.Fatalf("%s: got %v, want the answer to %s", c.ID, m, id)
	}
	return m
}

// histPage asks gateway/history and returns the labels of the answer's
// envelopes and its more.
func histPage(c *harness.Client, id string, payload any) ([]string, bool) {
	c.T.Helper()
	m := histAsk(c, id, payload)
	if m.Kind() != "system/history" {
		c.T.Fatalf("%s: gateway/history %v: got %v", c.ID, payload, m)
	}
	return histAnswerLabels(c.T, m.Payload()), m.Payload()["more"] == true
}

// histAnswerLabels labels the envelopes of a system/history payload.
func histAnswerLabels(t *testing.T, payload map[string]any) []string {
	t.Helper()
	list, ok := payload["envelopes"].([]any)
	if !ok {
		t.Fatalf("system/history payload without envelopes: %v", payload)
	}
	out := []string{}
	for _, e := range list {
		o, _ := e.(map[string]any)
		out = append(out, histLabel(harness.Msg(o)))
	}
	return out
}

// histAskErr asks gateway/history and expects a refusal with this code.
func histAskErr(c *harness.Client, id string, payload any, code string) {
	c.T.Helper()
	m := histAsk(c, id, payload)
	if m.ErrCode() != code {
		c.T.Fatalf("%s: gateway/history %v: got %v, want system/error %s", c.ID, payload, m, code)
	}
	if !c.IsOpen() {
		c.T.Fatalf("%s: the connection closed after a refused gateway/history", c.ID)
	}
}

// histPost posts body to POST /pods/POD/envelopes as participant and
// returns the answer's results.
func histPost(t *testing.T, g *harness.Gateway, pod, participant, contentType, body string) []map[string]any {
	t.Helper()
	u := g.URL + "/pods/" + pod + "/envelopes?participant=" + url.QueryEscape(participant)
	hc := &http.Client{Timeout: 15 * time.Second}
	resp, err := hc.Post(u, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, b)
	}
	var answer struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &answer); err != nil {
		t.Fatalf("POST %s: answer %q: %v", u, b, err)
	}
	return answer.Results
}

// histFields lists a JSON object's members (key, raw value) in order,
// without the payload.
func histFields(t *testing.T, raw []byte) []string {
	t.Helper()
	if !gjson.ValidBytes(raw) {
		t.Fatalf("not JSON: %s", raw)
	}
	var out []string
	gjson.ParseBytes(raw).ForEach(func(k, v gjson.Result) bool {
		if k.String() != "payload" {
			out = append(out, k.Raw+":"+v.Raw)
		}
		return true
	})
	return out
}

// histChat is a main-context envelope with this id.
func histChat(id string) map[string]any {
	return map[string]any{"id": id, "kind": "chat", "payload": map[string]any{"text": id}}
}

// histIn is an envelope of kind with this id in context ctx (an object
// or a path).
func histIn(id, kind string, ctx any) map[string]any {
	return map[string]any{"id": id, "kind": kind, "context": ctx, "payload": map[string]any{"text": id}}
}

func histReasoning(id string) map[string]any { return map[string]any{"id": id, "type": "reasoning"} }

// TestHistoryFlagsFromEnvironment: --history, --history-age and
// --history-bytes are in the welcome's limits, also when set as MCPP_
// variables (the command line wins), and the gateway keeps that many.
func TestHistoryFlagsFromEnvironment(t *testing.T) {
	p := harness.StartGatewayProc(t, []string{"MCPP_LISTEN=127.0.0.1:0", "MCPP_HISTORY=3", "MCPP_HISTORY_AGE=90m", "MCPP_HISTORY_BYTES=64MiB"})
	g := p.GW
	alice := g.Dial(t, "hist-env", "alice", "echo=1")
	limits, _ := alice.Welcome.Payload()["limits"].(map[string]any)
	for k, v := range map[string]float64{"history": 3, "history_age_ms": 90 * 60 * 1000, "history_bytes": 64 << 20} {
		if got, ok := limits[k]; !ok || got != v {
			t.Errorf("limits.%s = %v, want %v (from MCPP_)", k, got, v)
		}
	}
	histSendSeen(alice, histChat("e1"), histChat("e2"), histChat("e3"), histChat("e4"), histChat("e5"))
	_, info, got := histJoin(t, g, "hist-env", "bob", "history=10")
	histEq(t, "history=10 with MCPP_HISTORY=3", histLabels(got), []string{"e3", "e4", "e5"})
	histWantInfo(t, "bob", info, map[string]any{"replayed": 3, "folded": 0, "collapsed": 0})

	// The command line wins over the environment.
	p2 := harness.StartGatewayProc(t, []string{"MCPP_LISTEN=127.0.0.1:0", "MCPP_HISTORY=3", "MCPP_HISTORY_AGE=90m", "MCPP_HISTORY_BYTES=64MiB"},
		"--history", "7", "--history-age", "2h", "--history-bytes", "32MiB")
	c := p2.GW.Dial(t, "hist-env", "carol", "")
	limits, _ = c.Welcome.Payload()["limits"].(map[string]any)
	for k, v := range map[string]float64{"history": 7, "history_age_ms": 2 * 3600 * 1000, "history_bytes": 32 << 20} {
		if got, ok := limits[k]; !ok || got != v {
			t.Errorf("limits.%s = %v, want %v (the flag over MCPP_)", k, got, v)
		}
	}

	// MCPP_HISTORY=0 turns it off.
	p3 := harness.StartGatewayProc(t, []string{"MCPP_LISTEN=127.0.0.1:0", "MCPP_HISTORY=0"})
	d := p3.GW.Dial(t, "hist-env", "dave", "echo=1")
	limits, _ = d.Welcome.Payload()["limits"].(map[string]any)
	if fmt.Sprint(limits["history"]) != "0" {
		t.Errorf("limits.history = %v with MCPP_HISTORY=0", limits["history"])
	}
	histSendSeen(d, histChat("same"))
	histSendSeen(d, histChat("same")) // no duplicate_id: it comes back again
}

// TestHistoryOff: with --history 0 a joiner that asks for history joins
// and gets nothing of the past, an id may come twice, and gateway/history
// answers an empty page.
func TestHistoryOff(t *testing.T) {
	g := harness.StartGateway(t, func(c *gateway.Config) { c.History = 0 })
	const pod = "hist-off"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	limits, _ := alice.Welcome.Payload()["limits"].(map[string]any)
	if fmt.Sprint(limits["history"]) != "0" {
		t.Errorf("limits.history = %v, want 0", limits["history"])
	}
	histSendSeen(alice, histChat("same"), histChat("other"))
	histSendSeen(alice, map[string]any{"id": "same", "kind": "chat", "payload": map[string]any{"text": "again"}})
	bob.ExpectEnvelope("chat", "same")
	bob.ExpectEnvelope("chat", "other")
	if m := bob.ExpectEnvelope("chat", "same"); m.Payload()["text"] != "again" {
		t.Fatalf("bob: the second 'same' is %v", m)
	}

	carol, info, got := histJoin(t, g, pod, "carol", "history=5")
	if len(got) != 0 || info == nil || info["replayed"] != float64(0) {
		t.Fatalf("history=5 with history off: welcome history %v, replayed %v", info, histLabels(got))
	}
	dave, info, got := histJoin(t, g, pod, "dave", "resume=same")
	if len(got) != 0 || info == nil || info["replayed"] != float64(0) || info["resumed"] != false {
		t.Fatalf("resume with history off: welcome history %v, replayed %v", info, histLabels(got))
	}
	histLive(t, alice, "live", bob, carol, dave)

	m := histAsk(carol, "q1", map[string]any{"limit": 10})
	if m.Kind() != "system/history" || !harness.JSONEqual(m.Payload(), map[string]any{"envelopes": []any{}, "more": false, "tokens": 0}) {
		t.Fatalf("gateway/history with history off: %v", m)
	}
	res := histPost(t, g, pod, "tool", "application/json", `{"id":"q2","kind":"gateway/history"}`)
	if len(res) != 1 || !harness.JSONEqual(res[0], map[string]any{"id": "q2", "answer": map[string]any{"envelopes": []any{}, "more": false, "tokens": 0}}) {
		t.Fatalf("POST gateway/history with history off: %v", res)
	}
}

// TestHistoryJoinLastN: history=N replays the last N envelopes the
// joiner's filter admits, oldest first, then live ones; history=all all
// of them; N over --history is --history; the joiner's own envelopes are
// replayed (echo is for live delivery); routing=directed leaves out what
// is addressed to others, and what is addressed to the joiner passes its
// filter.
func TestHistoryJoinLastN(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-lastn"
	alice := g.Dial(t, pod, "alice", "echo=1")
	histSendSeen(alice,
		histChat("m1"), histChat("m2"),
		histIn("c1", "step", histReasoning("ctx-a")),
		histChat("m3"), histChat("m4"),
		histIn("c2", "step", histReasoning("ctx-a")),
		map[string]any{"id": "d1", "kind": "chat", "to": []string{"carol"}, "payload": map[string]any{}},
		map[string]any{"id": "c3", "kind": "step", "to": []string{"carol"}, "context": histReasoning("ctx-a"), "payload": map[string]any{}},
		histChat("m5"))

	b, info, got := histJoin(t, g, pod, "bob", "history=3")
	histEq(t, "history=3", histLabels(got), []string{"d1", "c3", "m5"})
	histWantInfo(t, "history=3", info, map[string]any{"replayed": 3, "folded": 0, "collapsed": 0})
	if got[0]["to"] == nil || got[2].Payload()["text"] != "m5" {
		t.Fatalf("replayed envelopes are not as relayed: %v", got)
	}

	main, info, got := histJoin(t, g, pod, "mainonly", "contexts=none&history=3")
	histEq(t, "contexts=none&history=3", histLabels(got), []string{"m4", "d1", "m5"})
	histWantInfo(t, "contexts=none", info, map[string]any{"replayed": 3, "folded": 0, "collapsed": 0})

	all, _, got := histJoin(t, g, pod, "everyone", "history=all")
	histEq(t, "history=all", histLabels(got), []string{"m1", "m2", "c1", "m3", "m4", "c2", "d1", "c3", "m5"})

	mainAll, _, got := histJoin(t, g, pod, "mainall", "contexts=none&history=all")
	histEq(t, "contexts=none&history=all", histLabels(got), []string{"m1", "m2", "m3", "m4", "d1", "m5"})

	dave, _, got := histJoin(t, g, pod, "dave", "routing=directed&history=all")
	histEq(t, "routing=directed (d1 and c3 are to carol)", histLabels(got), []string{"m1", "m2", "c1", "m3", "m4", "c2", "m5"})
	carol, _, got := histJoin(t, g, pod, "carol", "routing=directed&contexts=none&history=all")
	histEq(t, "carol, contexts=none: what is addressed to her passes", histLabels(got), []string{"m1", "m2", "m3", "m4", "d1", "c3", "m5"})

	histLive(t, alice, "live1", b, main, all, mainAll, dave, carol)

	// The joiner's own envelopes are replayed, echo or not.
	self, info, got := histJoin(t, g, pod, "alice", "history=2")
	histEq(t, "alice's own, without echo", histLabels(got), []string{"m5", "live1"})
	histWantInfo(t, "alice", info, map[string]any{"replayed": 2, "folded": 0, "collapsed": 0})
	if self.Welcome.Payload()["filter"].(map[string]any)["echo"] != false {
		t.Fatalf("alice joined without echo, the welcome says %v", self.Welcome.Payload()["filter"])
	}

	// N over --history is taken as --history.
	g5 := histOn(t, func(c *gateway.Config) { c.History = 5 })
	a5 := g5.Dial(t, pod, "alice", "echo=1")
	for i := 1; i <= 8; i++ {
		histSendSeen(a5, histChat(fmt.Sprintf("n%d", i)))
	}
	_, info, got = histJoin(t, g5, pod, "bob", "history=100")
	histEq(t, "history=100 with --history 5", histLabels(got), []string{"n4", "n5", "n6", "n7", "n8"})
	histWantInfo(t, "history=100", info, map[string]any{"replayed": 5, "folded": 0, "collapsed": 0})
	_, _, got = histJoin(t, g5, pod, "carol", "history=all")
	histEq(t, "history=all with --history 5", histLabels(got), []string{"n4", "n5", "n6", "n7", "n8"})
}

// TestHistoryFolding: a joiner's replay leaves out the envelopes of a
// concluded context but its conclusion-kind envelopes and its event;
// active contexts and the main context come whole, a consumed transient
// envelope collapsed; fold=0 gives everything; the welcome counts exactly.
func TestHistoryFolding(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-fold"
	alice := g.Dial(t, pod, "alice", "echo=1")
	histSendSeen(alice, histChat("m1"), histIn("a1", "step", histReasoning("A")), histIn("a2", "step", histReasoning("A")),
		histIn("a-end", "conclusion", histReasoning("A")))
	if ev := histAwaitEvent(alice, "A"); ev.Payload()["reason"] != "conclusion" {
		t.Fatalf("A's event: %v", ev)
	}
	histSendSeen(alice, histIn("b1", "step", histReasoning("B")), histChat("m2"),
		map[string]any{"id": "tr", "kind": "tool/result", "lifecycle": map[string]any{"mode": "transient", "summary": "three rows"}, "payload": map[string]any{"rows": []int{1, 2, 3}}},
		map[string]any{"id": "cons", "kind": "chat", "lifecycle": map[string]any{"consumes": []string{"tr"}}, "payload": map[string]any{}},
		// A concluded id named again opens a new, active context.
		histIn("a3", "step", histReasoning("A")))

	j1, info, got := histJoin(t, g, pod, "j1", "history=all")
	histEq(t, "folded replay", histLabels(got), []string{"m1", "a-end", "ev:A", "b1", "m2", "tr", "cons", "a3"})
	histWantInfo(t, "history=all", info, map[string]any{"replayed": 8, "folded": 2, "collapsed": 1})
	if got[2].Payload()["event"] != "concluded" || got[2].Payload()["reason"] != "conclusion" {
		t.Fatalf("the replayed event: %v", got[2])
	}
	if pl := got[5].Payload(); pl["collapsed"] != true || pl["consumed_by"] != "cons" || pl["summary"] != "three rows" {
		t.Fatalf("tr is replayed as %v, want it collapsed", got[5])
	}

	j2, info, got := histJoin(t, g, pod, "j2", "fold=0&history=all")
	histEq(t, "fold=0", histLabels(got), []string{"m1", "a1", "a2", "a-end", "ev:A", "b1", "m2", "tr", "cons", "a3"})
	histWantInfo(t, "fold=0", info, map[string]any{"replayed": 10, "folded": 0, "collapsed": 0})
	if pl := got[7].Payload(); pl["collapsed"] != nil || pl["rows"] == nil {
		t.Fatalf("fold=0: tr is replayed as %v, want it whole", got[7])
	}

	j3, info, got := histJoin(t, g, pod, "j3", "contexts=none&conclusions=1&history=all")
	histEq(t, "conclusions only", histLabels(got), []string{"m1", "a-end", "ev:A", "m2", "tr", "cons"})
	histWantInfo(t, "conclusions only", info, map[string]any{"replayed": 6, "folded": 0, "collapsed": 1})

	j4, info, got := histJoin(t, g, pod, "j4", "history=3")
	histEq(t, "history=3", histLabels(got), []string{"tr", "cons", "a3"})
	if info["replayed"] != float64(3) || info["collapsed"] != float64(1) {
		t.Fatalf("history=3: the welcome's history is %v", info)
	}
	histLive(t, alice, "live", j1, j2, j3, j4)
}

// TestHistoryFoldingTimeout: a context concluded by --context-timeout
// folds too: its event is replayed, its envelopes are not.
func TestHistoryFoldingTimeout(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) { c.ContextTimeout = 400 * time.Millisecond })
	const pod = "hist-fold-timeout"
	alice := g.Dial(t, pod, "alice", "echo=1")
	histSendSeen(alice, histIn("t1", "step", histReasoning("T")), histIn("t2", "step", histReasoning("T")), histChat("m1"))
	if ev := histAwaitEvent(alice, "T"); ev.Payload()["reason"] != "timeout" {
		t.Fatalf("T's event: %v", ev)
	}
	j1, info, got := histJoin(t, g, pod, "j1", "history=all")
	histEq(t, "folded replay", histLabels(got), []string{"m1", "ev:T"})
	histWantInfo(t, "history=all", info, map[string]any{"replayed": 2, "folded": 2, "collapsed": 0})
	if got[1].Payload()["reason"] != "timeout" {
		t.Fatalf("the replayed event: %v", got[1])
	}
	j2, info, got := histJoin(t, g, pod, "j2", "history=all&fold=0")
	histEq(t, "fold=0", histLabels(got), []string{"t1", "t2", "m1", "ev:T"})
	histWantInfo(t, "fold=0", info, map[string]any{"replayed": 4, "folded": 0, "collapsed": 0})
	histLive(t, alice, "live", j1, j2)
}

// TestHistoryLifecycleInvalid: every malformed lifecycle is refused with
// invalid_envelope, the connection open, and nobody receives it.
func TestHistoryLifecycleInvalid(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-lifecycle-bad"
	alice := g.Dial(t, pod, "alice", "")
	bob := g.Dial(t, pod, "bob", "")
	var ids65 []string
	for i := 0; i < 65; i++ {
		ids65 = append(ids65, fmt.Sprintf("x%d", i))
	}
	b65, _ := json.Marshal(ids65)
	b64, _ := json.Marshal(ids65[:64])
	cases := []struct{ name, lifecycle string }{
		{"a string", `"transient"`},
		{"an array", `[]`},
		{"a number", `1`},
		{"true", `true`},
		{"null", `null`},
		{"an unknown key", `{"mode":"durable","keep":true}`},
		{"an unknown key alone", `{"ttl":5}`},
		{"a bad mode", `{"mode":"forever"}`},
		{"an empty mode", `{"mode":""}`},
		{"a mode in capitals", `{"mode":"Transient","summary":"s"}`},
		{"a mode that is not a string", `{"mode":1}`},
		{"a null mode", `{"mode":null}`},
		{"transient without summary", `{"mode":"transient"}`},
		{"an empty summary", `{"mode":"transient","summary":""}`},
		{"a summary of 1025 bytes", `{"mode":"transient","summary":"` + strings.Repeat("s", 1025) + `"}`},
		{"a summary that is not a string", `{"mode":"transient","summary":{"text":"s"}}`},
		{"a null summary", `{"mode":"transient","summary":null}`},
		{"summary with durable", `{"mode":"durable","summary":"s"}`},
		{"summary without mode", `{"summary":"s"}`},
		{"summary with ephemeral", `{"mode":"ephemeral","summary":"s"}`},
		{"consumes empty", `{"consumes":[]}`},
		{"consumes 65 ids", `{"consumes":` + string(b65) + `}`},
		{"consumes numbers", `{"consumes":[1,2]}`},
		{"consumes objects", `{"consumes":[{"id":"x"}]}`},
		{"consumes a null", `{"consumes":["a",null]}`},
		{"consumes not an array", `{"consumes":"a"}`},
		{"consumes null", `{"consumes":null}`},
		{"consumes an empty id", `{"consumes":[""]}`},
		{"consumes an id of 129 bytes", `{"consumes":["` + strings.Repeat("i", 129) + `"]}`},
		{"mode twice", `{"mode":"durable","mode":"ephemeral"}`},
	}
	for i, tc := range cases {
		id := fmt.Sprintf("bad-%d", i)
		alice.SendRaw([]byte(fmt.Sprintf(`{"id":%q,"kind":"chat","lifecycle":%s,"payload":{}}`, id, tc.lifecycle)))
		m := alice.NextOf()
		if m.ErrCode() != "invalid_envelope" || m.Str("correlation_id") != id {
			t.Errorf("lifecycle %s (%s): got %v, want invalid_envelope for %s", tc.name, tc.lifecycle, m, id)
		}
		if !alice.IsOpen() {
			t.Fatalf("lifecycle %s: the connection closed", tc.name)
		}
	}
	// The limits themselves are accepted.
	for _, lc := range []string{
		`{"mode":"transient","summary":"` + strings.Repeat("s", 1024) + `"}`,
		`{"consumes":` + string(b64) + `}`,
		`{"consumes":["` + strings.Repeat("i", 128) + `"]}`,
		`{}`,
		`{"mode":"durable"}`,
		`{"mode":"ephemeral","consumes":["a"]}`,
	} {
		alice.SendRaw([]byte(fmt.Sprintf(`{"kind":"chat","lifecycle":%s,"payload":{"ok":true}}`, lc)))
		if m := bob.NextOf(); m.Kind() != "chat" || m.Payload()["ok"] != true {
			t.Fatalf("lifecycle %s: bob got %v, want it relayed", lc, m)
		}
	}
	alice.Send(histChat("after"))
	if m := bob.NextOf(); m.Str("id") != "after" {
		t.Fatalf("bob got %v, want the envelope after the refused ones", m)
	}
}

// TestHistoryTransientCollapse: a transient envelope consumed by a later
// one is replayed collapsed (payload exactly the summary, every other
// member byte for byte as relayed), whole with fold=0; live delivery is
// never changed; consumes of unknown, durable or consumed ids, or of
// another pod's envelope, change nothing.
func TestHistoryTransientCollapse(t *testing.T) {
	g := histOn(t, nil)
	const pod, other = "hist-collapse", "hist-collapse-other"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	summary := `15 activity records (page 1/9, "IDs": 72, 73, 74…) é`
	tr1 := `{"id":"tr1","kind":"tool/result","x-extra":{"keep":[1,2]},"lifecycle":{"mode":"transient","summary":` + string(harness.MustJSON(t, summary)) + `},"payload":{"records":[72,73,74],"page":1}, "correlation_id":"call-1"}`
	tr2 := `{"kind":"tool/result","id":"tr2","lifecycle":{"summary":"no payload","mode":"transient"}}`
	histSendSeen(alice, histChat("m-durable"), tr1, tr2,
		`{"id":"c1","kind":"tool/used","lifecycle":{"consumes":["tr1","tr2","nope","m-durable"]},"payload":{"used":2}}`,
		`{"id":"c2","kind":"tool/used","lifecycle":{"consumes":["tr1"]},"payload":{}}`,
		`{"id":"tr3","kind":"tool/result","lifecycle":{"mode":"transient","summary":"s3"},"payload":{"n":3}}`,
		`{"id":"e-cons","kind":"note","lifecycle":{"mode":"ephemeral","consumes":["tr3"]},"payload":{}}`,
		`{"id":"tr4","kind":"tool/result","lifecycle":{"mode":"transient","summary":"s4"},"payload":{"n":4}}`)

	// Live: relayed as sent.
	liveRaw := map[string][]byte{}
	for _, id := range []string{"m-durable", "tr1", "tr2", "c1", "c2", "tr3", "e-cons", "tr4"} {
		m := bob.NextOf()
		if m.Str("id") != id {
			t.Fatalf("bob got %v, want %s", m, id)
		}
		liveRaw[id] = histRawOf(bob, id)
	}
	if pl := gjson.GetBytes(liveRaw["tr1"], "payload").Raw; pl != `{"records":[72,73,74],"page":1}` {
		t.Fatalf("tr1 was relayed with payload %s", pl)
	}
	if lc := gjson.GetBytes(liveRaw["tr1"], "lifecycle.summary").String(); lc != summary {
		t.Fatalf("tr1 was relayed with lifecycle.summary %q", lc)
	}

	carol, info, got := histJoin(t, g, pod, "carol", "history=all")
	histEq(t, "replay", histLabels(got), []string{"m-durable", "tr1", "tr2", "c1", "c2", "tr3", "tr4"})
	histWantInfo(t, "carol", info, map[string]any{"replayed": 7, "folded": 0, "collapsed": 3})
	carolRaw := map[string][]byte{}
	for _, m := range got {
		carolRaw[m.Str("id")] = histRawOf(carol, m.Str("id"))
	}
	for _, c := range []struct{ id, summary, by string }{{"tr1", summary, "c1"}, {"tr2", "no payload", "c1"}, {"tr3", "s3", "e-cons"}} {
		raw := carolRaw[c.id]
		want := map[string]any{"collapsed": true, "summary": c.summary, "consumed_by": c.by}
		if pl := gjson.GetBytes(raw, "payload"); !pl.IsObject() || !harness.JSONEqual(pl.Value(), want) || len(pl.Map()) != 3 {
			t.Errorf("%s is replayed with payload %s, want exactly %v", c.id, pl.Raw, want)
		}
		if a, b := histFields(t, liveRaw[c.id]), histFields(t, raw); strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Errorf("%s: collapsed, its other members changed:\nrelayed  %s\nreplayed %s", c.id, liveRaw[c.id], raw)
		}
	}
	for _, id := range []string{"m-durable", "c1", "c2", "tr4"} {
		if raw := carolRaw[id]; string(raw) != string(liveRaw[id]) {
			t.Errorf("%s is replayed as %s, relayed as %s", id, raw, liveRaw[id])
		}
	}

	dan, info, got := histJoin(t, g, pod, "dan", "history=all&fold=0")
	histEq(t, "fold=0 replay", histLabels(got), []string{"m-durable", "tr1", "tr2", "c1", "c2", "tr3", "tr4"})
	histWantInfo(t, "dan", info, map[string]any{"replayed": 7, "folded": 0, "collapsed": 0})
	for _, id := range []string{"m-durable", "tr1", "tr2", "c1", "c2", "tr3", "tr4"} {
		if raw := histRawOf(dan, id); string(raw) != string(liveRaw[id]) {
			t.Errorf("fold=0: %s is replayed as %s, relayed as %s", id, raw, liveRaw[id])
		}
	}

	// gateway/history folds and collapses the same way by default.
	m := histAsk(dan, "q1", nil)
	envs, _ := m.Payload()["envelopes"].([]any)
	if len(envs) != 7 || !harness.JSONEqual(envs[1].(map[string]any)["payload"], map[string]any{"collapsed": true, "summary": summary, "consumed_by": "c1"}) {
		t.Fatalf("gateway/history: %v", m)
	}
	m = histAsk(dan, "q2", map[string]any{"fold": false})
	envs, _ = m.Payload()["envelopes"].([]any)
	if len(envs) != 7 || !harness.JSONEqual(envs[1].(map[string]any)["payload"], map[string]any{"records": []int{72, 73, 74}, "page": 1}) {
		t.Fatalf("gateway/history fold false: %v", m)
	}

	// A consumes in one pod does not reach another pod's envelope.
	ox := g.Dial(t, other, "alice", "echo=1")
	histSendSeen(ox, `{"id":"tr-x","kind":"tool/result","lifecycle":{"mode":"transient","summary":"x"},"payload":{"x":1}}`)
	histSendSeen(alice, `{"id":"c-x","kind":"tool/used","lifecycle":{"consumes":["tr-x"]},"payload":{}}`)
	_, info, got = histJoin(t, g, other, "erin", "history=all")
	histEq(t, "the other pod", histLabels(got), []string{"tr-x"})
	histWantInfo(t, "erin", info, map[string]any{"replayed": 1, "folded": 0, "collapsed": 0})
	if got[0].Payload()["x"] != float64(1) {
		t.Fatalf("the other pod's tr-x is replayed as %v", got[0])
	}
	for _, c := range []*harness.Client{bob, carol, dan} {
		c.ExpectEnvelope("tool/used", "c-x")
	}
	histLive(t, alice, "live", bob, carol, dan)
}

// TestHistoryEphemeral: an ephemeral envelope is delivered live, never
// replayed nor answered in gateway/history, never checked for
// duplicate_id, and a client that saw it last resumes from its place.
func TestHistoryEphemeral(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-ephemeral"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	eph := func(id, text string) string {
		return fmt.Sprintf(`{"id":%q,"kind":"status","lifecycle":{"mode":"ephemeral"},"payload":{"text":%q}}`, id, text)
	}
	histSendSeen(alice, histChat("m1"), eph("e1", "first"), eph("e1", "again"), eph("m1", "an id history holds"), histChat("x1"), eph("eph-r", "last seen"))
	for _, want := range []string{"m1", "e1", "e1", "m1", "x1", "eph-r"} {
		if m := bob.NextOf(); m.Str("id") != want {
			t.Fatalf("bob got %v, want %s", m, want)
		}
	}
	raw := histRawOf(bob, "e1")
	if gjson.GetBytes(raw, "lifecycle.mode").String() != "ephemeral" || gjson.GetBytes(raw, "payload.text").String() != "first" {
		t.Fatalf("e1 was relayed as %s", raw)
	}

	// bob saw eph-r last; he drops, misses x2 and another ephemeral one,
	// and resumes from eph-r's place.
	if err := bob.Conn.Close(); err != nil {
		t.Fatal(err)
	}
	alice.AwaitPresence("leave", "bob", 5*time.Second)
	histSendSeen(alice, eph("eph-away", "missed"), histChat("x2"))
	bob2, info, got := histJoin(t, g, pod, "bob", "resume=eph-r")
	histEq(t, "resume from an ephemeral envelope", histLabels(got), []string{"x2"})
	histWantInfo(t, "bob", info, map[string]any{"resumed": true, "replayed": 1})

	carol, info, got := histJoin(t, g, pod, "carol", "history=all&fold=0")
	histEq(t, "history=all", histLabels(got), []string{"m1", "x1", "x2"})
	histWantInfo(t, "carol", info, map[string]any{"replayed": 3, "folded": 0, "collapsed": 0})
	if got[0].Payload()["text"] != "m1" {
		t.Fatalf("m1 is replayed as %v", got[0])
	}
	labels, more := histPage(carol, "q1", map[string]any{"fold": false})
	histEq(t, "gateway/history", labels, []string{"m1", "x1", "x2"})
	if more {
		t.Fatal("gateway/history says more")
	}
	histLive(t, alice, "live", bob2, carol)
}

// TestHistoryDuplicateID: an id the pod's history holds is refused with
// duplicate_id, over WebSocket and over POST, from anyone; the first one
// stands and nobody receives the second. When two senders race with one
// id, exactly one gets through.
func TestHistoryDuplicateID(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-dup"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	carol := g.Dial(t, pod, "carol", "")
	histSendSeen(alice, map[string]any{"id": "d1", "kind": "chat", "payload": map[string]any{"v": "first"}})
	alice.Send(map[string]any{"id": "d1", "kind": "chat", "payload": map[string]any{"v": "second"}})
	e := alice.ExpectErr("duplicate_id")
	if e.Str("correlation_id") != "d1" || e.Payload()["retryable"] != false {
		t.Fatalf("duplicate_id: %v", e)
	}
	carol.ExpectEnvelope("chat", "d1")
	carol.Send(map[string]any{"id": "d1", "kind": "other", "payload": map[string]any{"v": "carol's"}})
	carol.ExpectErr("duplicate_id")

	res := histPost(t, g, pod, "tool", "application/json", `{"id":"d1","kind":"chat","payload":{"v":"posted"}}`)
	if len(res) != 1 || res[0]["error"] != "duplicate_id" || res[0]["id"] != "d1" || res[0]["retryable"] != false {
		t.Fatalf("POST of d1: %v", res)
	}
	res = histPost(t, g, pod, "tool", "application/x-ndjson", `{"id":"p1","kind":"chat","payload":{"v":"first"}}`+"\n"+`{"id":"p1","kind":"chat","payload":{"v":"second"}}`+"\n")
	if len(res) != 2 || !harness.JSONEqual(res[0], map[string]any{"id": "p1"}) || res[1]["error"] != "duplicate_id" || res[1]["id"] != "p1" {
		t.Fatalf("POST of p1 twice: %v", res)
	}
	alice.ExpectEnvelope("chat", "p1") // the posted one, relayed
	alice.Send(map[string]any{"id": "p1", "kind": "chat", "payload": map[string]any{}})
	alice.ExpectErr("duplicate_id")

	for _, want := range []string{"d1", "p1"} {
		m := bob.NextOf()
		if m.Str("id") != want || m.Payload()["v"] != "first" {
			t.Fatalf("bob got %v, want the first %s", m, want)
		}
	}
	histLive(t, alice, "after", bob)

	_, _, got := histJoin(t, g, pod, "dan", "history=all")
	histEq(t, "history", histLabels(got), []string{"d1", "p1", "after"})
	if got[0].Payload()["v"] != "first" || got[1].Payload()["v"] != "first" {
		t.Fatalf("the history holds %v", got)
	}

	// Two senders race with the same ids: one of each pair gets through.
	r1 := g.Dial(t, pod, "r1", "")
	r2 := g.Dial(t, pod, "r2", "")
	const n = 50
	var wg sync.WaitGroup
	for _, c := range []*harness.Client{r1, r2} {
		wg.Add(1)
		go func(c *harness.Client) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				b, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("race-%d", i), "kind": "race", "payload": map[string]any{"by": c.ID}})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.Conn.Write(ctx, b)
				cancel()
				if err != nil {
					t.Errorf("%s: write: %v", c.ID, err)
					return
				}
			}
		}(c)
	}
	wg.Wait()
	seen := map[string]int{}
	for len(seen) < n {
		m := bob.NextOf()
		if m.Kind() != "race" {
			t.Fatalf("bob got %v, want race envelopes", m)
		}
		seen[m.Str("id")]++
	}
	dups := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for total := 0; total < n && time.Now().Before(deadline); {
		for _, c := range []*harness.Client{r1, r2} {
			m := c.Next(20 * time.Millisecond)
			if m == nil || m.Kind() == "system/presence" || m.Kind() == "race" {
				continue
			}
			if m.ErrCode() != "duplicate_id" {
				t.Fatalf("%s: got %v, want duplicate_id", c.ID, m)
			}
			dups[m.Str("correlation_id")]++
			total++
		}
	}
	histLive(t, alice, "after-race", bob)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("race-%d", i)
		if seen[id] != 1 || dups[id] != 1 {
			t.Errorf("%s: relayed %d times, refused %d times; want once each", id, seen[id], dups[id])
		}
	}
}

// TestHistoryDuplicateIDOrder: the table of docs/protocol.md section 5 orders
// the refusals: a context error comes before duplicate_id, duplicate_id
// before context_limit_exceeded and rate_limited. A refused envelope does not
// keep its id.
func TestHistoryDuplicateIDOrder(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-dup-order"
	alice := g.Dial(t, pod, "alice", "echo=1")
	histSendSeen(alice, histChat("d1"), histIn("d2", "step", histReasoning("X")))
	for _, tc := range []struct {
		env  string
		want string
	}{
		{`{"id":"d1","kind":"chat","context":{"id":""}}`, "invalid_context"},
		{`{"id":"d1","kind":"chat","context":"bad path!"}`, "invalid_context"},
		{`{"id":"d1","kind":"chat","context":{"id":"X","type":"workflow"}}`, "context_conflict"},
		{`{"id":"d2","kind":"chat","context":{"id":"X","type":"workflow"}}`, "context_conflict"},
		{`{"id":"d1","kind":"chat","context":"a/b/c/d/e/f"}`, "context_depth_exceeded"},
		{`{"id":"d1","kind":"chat","context":{"id":"X","type":"reasoning"}}`, "duplicate_id"},
		{`{"id":"d2","kind":"chat"}`, "duplicate_id"},
		{`{"id":"z1","kind":"chat","context":{"id":"X","type":"workflow"}}`, "context_conflict"},
	} {
		alice.SendRaw([]byte(tc.env))
		m := alice.NextOf()
		if m.ErrCode() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.env, m, tc.want)
		}
	}
	// z1 was refused: its id is free.
	histSendSeen(alice, histChat("z1"))

	// duplicate_id before context_limit_exceeded and rate_limited.
	gr := histOn(t, func(c *gateway.Config) { c.Rate = 0.001; c.Burst = 3; c.MaxContextsPerParticipant = 1 })
	r := gr.Dial(t, pod, "r", "echo=1")
	histSendSeen(r, histChat("r1"), histIn("r2", "step", histReasoning("Y")), histChat("r3")) // the burst is spent; Y is r's one context
	for _, tc := range []struct {
		env  string
		want string
	}{
		{`{"id":"r1","kind":"chat"}`, "duplicate_id"},
		{`{"id":"r2","kind":"step","context":{"id":"Y","type":"reasoning"}}`, "duplicate_id"},
		{`{"id":"r1","kind":"step","context":{"id":"Z","type":"reasoning"}}`, "duplicate_id"},
		{`{"id":"r1","kind":"step","context":{"id":"Y","type":"workflow"}}`, "context_conflict"},
		{`{"id":"r9","kind":"step","context":{"id":"Z","type":"reasoning"}}`, "context_limit_exceeded"},
		{`{"id":"r9","kind":"chat"}`, "rate_limited"},
	} {
		r.SendRaw([]byte(tc.env))
		m := r.NextOf()
		if m.ErrCode() != tc.want {
			t.Errorf("rate spent: %s: got %v, want %s", tc.env, m, tc.want)
		}
	}
}

// TestHistoryRequestOrder: gateway/history's refusals follow the table of
// docs/protocol.md section 5: a payload that does not fit the request
// (invalid_envelope, an unknown before or after id included) comes before
// rate_limited, over WebSocket and over POST alike.
func TestHistoryRequestOrder(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) { c.Rate, c.Burst = 0.01, 2 })
	const pod = "hist-request-order"
	alice := g.Dial(t, pod, "alice", "echo=1")
	start := time.Now()
	histSendSeen(alice, histChat("o1"), histChat("o2")) // the two tokens
	for i, tc := range []struct {
		payload any
		want    string
	}{
		{map[string]any{"before": "nope"}, "invalid_envelope"},
		{map[string]any{"after": "nope"}, "invalid_envelope"},
		{map[string]any{"before": "o1", "after": "o2"}, "invalid_envelope"},
		{map[string]any{"limit": 0}, "invalid_envelope"},
		{map[string]any{"before": "o2"}, "rate_limited"},
		{nil, "rate_limited"},
	} {
		histAskErr(alice, fmt.Sprintf("q%d", i), tc.payload, tc.want)
	}
	res := histPost(t, g, pod, "alice", "application/x-ndjson",
		`{"id":"p1","kind":"gateway/history","payload":{"after":"nope"}}`+"\n"+`{"id":"p2","kind":"gateway/history","payload":{"after":"o1"}}`+"\n")
	if len(res) != 2 || res[0]["error"] != "invalid_envelope" || res[1]["error"] != "rate_limited" {
		t.Errorf("POST: %v, want invalid_envelope then rate_limited", res)
	}
	if elapsed := time.Since(start); elapsed >= 90*time.Second {
		t.Fatalf("the test took %v: a token may have refilled", elapsed)
	}
}

// TestHistoryResume: a participant whose connection dropped resumes from
// the last envelope it saw: everything after it that its filter admits,
// unfolded and uncollapsed, echo applying, then live ones, no gap and no
// duplicate. An id the history does not hold says resumed false.
func TestHistoryResume(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-resume"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	erin := g.Dial(t, pod, "erin", "echo=1")
	histSendSeen(alice, histChat("m1"), histChat("m2"))
	for _, c := range []*harness.Client{bob, erin} {
		c.ExpectEnvelope("chat", "m1")
		c.ExpectEnvelope("chat", "m2")
	}
	// bob's own b1 comes after m2; without echo he never receives it.
	bob.Send(histChat("b1"))
	alice.ExpectEnvelope("chat", "b1")
	erin.ExpectEnvelope("chat", "b1")
	for _, c := range []*harness.Client{bob, erin} {
		if err := c.Conn.Close(); err != nil {
			t.Fatal(err)
		}
		alice.AwaitPresence("leave", c.ID, 5*time.Second)
	}

	// Meanwhile: a context concludes, a transient envelope is consumed, an
	// ephemeral one passes, and bob and erin post envelopes of their own.
	histSendSeen(alice, histIn("k1", "step", histReasoning("K")), histIn("k-end", "conclusion", histReasoning("K")))
	histAwaitEvent(alice, "K")
	histSendSeen(alice,
		`{"id":"tr","kind":"tool/result","lifecycle":{"mode":"transient","summary":"s"},"payload":{"rows":[1,2]}}`,
		`{"id":"cons","kind":"chat","lifecycle":{"consumes":["tr"]},"payload":{}}`,
		`{"id":"eph","kind":"status","lifecycle":{"mode":"ephemeral"},"payload":{}}`,
		histChat("m3"),
		map[string]any{"id": "to-carol", "kind": "chat", "to": []string{"carol"}, "payload": map[string]any{}})
	if r := histPost(t, g, pod, "bob", "application/json", `{"id":"b2","kind":"chat","payload":{}}`); len(r) != 1 || r[0]["id"] != "b2" {
		t.Fatalf("POST as bob: %v", r)
	}
	if r := histPost(t, g, pod, "erin", "application/json", `{"id":"e2","kind":"chat","payload":{}}`); len(r) != 1 || r[0]["id"] != "e2" {
		t.Fatalf("POST as erin: %v", r)
	}
	alice.ExpectEnvelope("chat", "b2")
	alice.ExpectEnvelope("chat", "e2")
	trRaw := histRawOf(alice, "tr")

	bob2, info, got := histJoin(t, g, pod, "bob", "resume=m2")
	histEq(t, "bob's resume (no echo: not b1, not b2)", histLabels(got), []string{"k1", "k-end", "ev:K", "tr", "cons", "m3", "to-carol", "e2"})
	histWantInfo(t, "bob", info, map[string]any{"resumed": true, "replayed": 8})
	erin2, info, got := histJoin(t, g, pod, "erin", "resume=m2&echo=1")
	histEq(t, "erin's resume (echo)", histLabels(got), []string{"b1", "k1", "k-end", "ev:K", "tr", "cons", "m3", "to-carol", "b2", "e2"})
	histWantInfo(t, "erin", info, map[string]any{"resumed": true, "replayed": 10})
	if raw := histRawOf(erin2, "tr"); string(raw) != string(trRaw) {
		t.Fatalf("tr is resumed as %s, relayed as %s", raw, trRaw)
	}

	// resume with history=N: the resume wins when the id is known.
	fay, info, got := histJoin(t, g, pod, "fay", "resume=m3&history=5")
	histEq(t, "fay's resume", histLabels(got), []string{"to-carol", "b2", "e2"})
	histWantInfo(t, "fay", info, map[string]any{"resumed": true, "replayed": 3})

	// An id the history does not hold.
	carol, info, got := histJoin(t, g, pod, "carol", "resume=never-there")
	histEq(t, "an unknown id", histLabels(got), []string{})
	histWantInfo(t, "carol", info, map[string]any{"resumed": false, "replayed": 0})
	dan, info, got := histJoin(t, g, pod, "dan", "resume=never-there&history=2")
	histEq(t, "an unknown id with history=2", histLabels(got), []string{"b2", "e2"})
	if info["resumed"] != false || info["replayed"] != float64(2) || info["collapsed"] != float64(0) || info["folded"] == nil {
		t.Fatalf("dan: the welcome's history is %v", info)
	}
	gus, info, got := histJoin(t, g, pod, "gus", "resume=never-there&history=all")
	histEq(t, "an unknown id with history=all", histLabels(got), []string{"m1", "m2", "b1", "k-end", "ev:K", "tr", "cons", "m3", "to-carol", "b2", "e2"})
	histWantInfo(t, "gus", info, map[string]any{"resumed": false, "replayed": 11, "folded": 1, "collapsed": 1})

	histLive(t, alice, "live", bob2, erin2, fay, carol, dan, gus)
}

// TestHistoryBadQuery: history=, fold= and resume= values that do not
// parse refuse the upgrade with 400 invalid_filter.
func TestHistoryBadQuery(t *testing.T) {
	g := histOn(t, nil)
	for _, q := range []string{
		"history=0", "history=-1", "history=x", "history=", "history=1.5", "history=ALL", "history=1&history=2",
		"fold=2", "fold=", "fold=yes", "fold=0&fold=1",
		"resume=", "resume=" + strings.Repeat("r", 129), "resume=a&resume=b",
		"history=3&fold=x", "resume=&history=2",
	} {
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		v.Set("pod", "hist-badq")
		v.Set("participant", "p")
		if status, code := harness.Refusal(t, g.WS, v, nil); status != http.StatusBadRequest || code != "invalid_filter" {
			t.Errorf("%s: %d %s, want 400 invalid_filter", q, status, code)
		}
	}
	// The bounds themselves are accepted.
	for _, q := range []string{"history=1", "history=all", "history=100000", "fold=0&history=2", "fold=1", "resume=" + strings.Repeat("r", 128)} {
		c := g.Dial(t, "hist-badq", "ok", q)
		if c.Welcome == nil {
			t.Fatalf("%s: no welcome", q)
		}
	}
}

// TestHistoryRequest: gateway/history pages the pod's history by id,
// keeps one context and its descendants, folds unless told not to, and
// bounds its answer; bad requests are invalid_envelope; over POST it is
// answered in the entry.
func TestHistoryRequest(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) { c.MaxMessageBytes = 4096 })
	const pod = "hist-request"
	alice := g.Dial(t, pod, "alice", "echo=1")
	var all []string
	var envs []any
	for i := 0; i < 120; i++ {
		id := fmt.Sprintf("p%03d", i)
		all = append(all, id)
		envs = append(envs, histChat(id))
	}
	histSendSeen(alice, envs...)
	bob := g.Dial(t, pod, "bob", "")

	got, more := histPage(bob, "q-default", nil)
	histEq(t, "the default: the newest 100", got, all[20:])
	if !more {
		t.Error("the default page: more is false, 20 older were left out")
	}
	got, more = histPage(bob, "q-empty", map[string]any{})
	histEq(t, "an empty payload", got, all[20:])
	got, more = histPage(bob, "q-1000", map[string]any{"limit": 1000})
	histEq(t, "limit 1000", got, all)
	if more {
		t.Error("limit 1000: more is true")
	}
	got, more = histPage(bob, "q-1", map[string]any{"limit": 1})
	histEq(t, "limit 1", got, all[119:])
	if !more {
		t.Error("limit 1: more is false")
	}

	// Paging back, then forward: every page exclusive of its id, together
	// the whole history, each once.
	var back []string
	before := ""
	for pages := 0; ; pages++ {
		q := map[string]any{"limit": 25}
		if before != "" {
			q["before"] = before
		}
		got, more := histPage(bob, fmt.Sprintf("back-%d", pages), q)
		back = append(append([]string{}, got...), back...)
		if !more {
			break
		}
		if pages > 10 || len(got) == 0 {
			t.Fatalf("paging back does not end: %v", back)
		}
		before = got[0]
	}
	histEq(t, "paged back", back, all)
	var fwd []string
	after := "p000"
	for pages := 0; ; pages++ {
		got, more := histPage(bob, fmt.Sprintf("fwd-%d", pages), map[string]any{"limit": 25, "after": after})
		fwd = append(fwd, got...)
		if !more {
			break
		}
		if pages > 10 || len(got) == 0 {
			t.Fatalf("paging forward does not end: %v", fwd)
		}
		after = got[len(got)-1]
	}
	histEq(t, "paged forward after p000", fwd, all[1:])
	got, more = histPage(bob, "q-b10", map[string]any{"before": "p010", "limit": 5})
	histEq(t, "before p010", got, all[5:10])
	if !more {
		t.Error("before p010 limit 5: more is false")
	}
	got, more = histPage(bob, "q-b0", map[string]any{"before": "p000"})
	if len(got) != 0 || more {
		t.Errorf("before the oldest: %v more %v", got, more)
	}
	got, more = histPage(bob, "q-a119", map[string]any{"after": "p119"})
	if len(got) != 0 || more {
		t.Errorf("after the newest: %v more %v", got, more)
	}
	got, more = histPage(bob, "q-a100", map[string]any{"after": "p100", "limit": 19})
	histEq(t, "after p100 limit 19", got, all[101:])
	if more {
		t.Error("after p100 limit 19: more is true, nothing newer was left out")
	}

	for i, bad := range []any{
		map[string]any{"limit": 0}, map[string]any{"limit": -1}, map[string]any{"limit": 1001}, map[string]any{"limit": 1.5},
		map[string]any{"limit": "10"}, map[string]any{"before": "nope"}, map[string]any{"after": "nope"},
		map[string]any{"before": "p010", "after": "p005"}, map[string]any{"fold": "no"}, "all", []any{},
	} {
		histAskErr(bob, fmt.Sprintf("bad-%d", i), bad, "invalid_envelope")
	}

	// Its own envelopes are answered to the sender, whatever its echo.
	a2 := g.Dial(t, pod, "alice", "")
	got, _ = histPage(a2, "q-own", map[string]any{"limit": 2})
	histEq(t, "alice's own", got, all[118:])

	// Contexts: one and its descendants; the filter applies; folding.
	const cpod = "hist-request-ctx"
	ca := g.Dial(t, cpod, "alice", "echo=1")
	histSendSeen(ca, histChat("c-m1"),
		histIn("p1", "step", map[string]any{"id": "P", "type": "workflow"}),
		histIn("q1", "step", map[string]any{"id": "Q", "type": "reasoning", "parent": "P"}),
		histIn("r1", "step", map[string]any{"id": "R", "type": "workflow"}),
		histIn("q2", "step", map[string]any{"id": "Q2", "parent": "Q"}),
		histIn("s1", "step", "P/s"),
		histIn("f1", "step", histReasoning("F")),
		histIn("f-end", "conclusion", histReasoning("F")))
	histAwaitEvent(ca, "F")
	histSendSeen(ca, histChat("c-m2"))
	cb := g.Dial(t, cpod, "bob", "")
	got, _ = histPage(cb, "ctx-p", map[string]any{"context": "P"})
	histEq(t, "context P", got, []string{"p1", "q1", "q2", "s1"})
	got, _ = histPage(cb, "ctx-q", map[string]any{"context": "Q"})
	histEq(t, "context Q", got, []string{"q1", "q2"})
	got, _ = histPage(cb, "ctx-q-limit", map[string]any{"context": "P", "limit": 2})
	histEq(t, "context P limit 2", got, []string{"q2", "s1"})
	got, _ = histPage(cb, "ctx-f", map[string]any{"context": "F"})
	histEq(t, "context F, folded", got, []string{"f-end", "ev:F"})
	got, _ = histPage(cb, "ctx-f-unfolded", map[string]any{"context": "F", "fold": false})
	histEq(t, "context F, fold false", got, []string{"f1", "f-end", "ev:F"})
	got, _ = histPage(cb, "all-folded", nil)
	histEq(t, "all, folded", got, []string{"c-m1", "p1", "q1", "r1", "q2", "s1", "f-end", "ev:F", "c-m2"})
	got, _ = histPage(cb, "all-unfolded", map[string]any{"fold": false})
	histEq(t, "all, fold false", got, []string{"c-m1", "p1", "q1", "r1", "q2", "s1", "f1", "f-end", "ev:F", "c-m2"})
	cm := g.Dial(t, cpod, "mainonly", "contexts=none&types=workflow")
	got, _ = histPage(cm, "filtered", map[string]any{"fold": false})
	histEq(t, "contexts=none&types=workflow", got, []string{"c-m1", "p1", "r1", "c-m2"})
	got, _ = histPage(cm, "filtered-q", map[string]any{"context": "Q"})
	histEq(t, "context Q, not admitted", got, []string{})

	// The answer holds at most 4 x --max-message-bytes of envelopes.
	const bpod = "hist-request-big"
	ba := g.Dial(t, bpod, "alice", "echo=1")
	var big []string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("big%d", i)
		big = append(big, id)
		histSendSeen(ba, harness.EnvelopeOfSize(t, id, "big", 3000))
	}
	bb := g.Dial(t, bpod, "bob", "")
	m := histAsk(bb, "big-newest", map[string]any{"limit": 100})
	got = histAnswerLabels(t, m.Payload())
	histEq(t, "3000-byte envelopes, 4 x 4096 bytes at most", got, big[5:])
	if m.Payload()["more"] != true {
		t.Error("the bounded answer: more is false")
	}
	size := 0
	for _, e := range m.Payload()["envelopes"].([]any) {
		b, _ := json.Marshal(e)
		size += len(b)
	}
	if size > 4*4096 {
		t.Errorf("the answer holds %d bytes of envelopes, over 4 x 4096", size)
	}
	got, more = histPage(bb, "big-older", map[string]any{"before": "big5"})
	histEq(t, "before big5", got, big[:5])
	if more {
		t.Error("before big5: more is true")
	}
	got, more = histPage(bb, "big-after", map[string]any{"after": "big0"})
	histEq(t, "after big0", got, big[1:6])
	if !more {
		t.Error("after big0: more is false")
	}

	// Over POST: answered in the entry, with the default filter.
	res := histPost(t, g, pod, "tool", "application/json", `{"id":"post-q","kind":"gateway/history","payload":{"limit":3}}`)
	if len(res) != 1 || res[0]["id"] != "post-q" {
		t.Fatalf("POST gateway/history: %v", res)
	}
	answer, _ := res[0]["answer"].(map[string]any)
	histEq(t, "POST gateway/history", histAnswerLabels(t, answer), all[117:])
	if answer["more"] != true {
		t.Errorf("POST gateway/history: more %v", answer["more"])
	}
	res = histPost(t, g, cpod, "tool", "application/x-ndjson", `{"id":"post-ctx","kind":"gateway/history","payload":{"context":"F","fold":false}}`+"\n"+`{"id":"post-bad","kind":"gateway/history","payload":{"before":"nope"}}`+"\n")
	if len(res) != 2 || res[0]["id"] != "post-ctx" || res[1]["error"] != "invalid_envelope" || res[1]["id"] != "post-bad" {
		t.Fatalf("POST gateway/history: %v", res)
	}
	answer, _ = res[0]["answer"].(map[string]any)
	histEq(t, "POST gateway/history context F", histAnswerLabels(t, answer), []string{"f1", "f-end", "ev:F"})
}

// TestHistoryMCPX: MCPx participants get replayed envelopes (and resumed
// ones, and gateway/history's) in mcpx/v0.1, byte for byte as they get
// live ones.
func TestHistoryMCPX(t *testing.T) {
	g := histOn(t, nil)
	const pod = "hist-mcpx"
	alice := g.Dial(t, pod, "alice", "echo=1")
	live, _, _ := histDialQ(t, g, url.Values{"topic": {pod}, "participant": {"mx-live"}})
	histSendSeen(alice, histChat("m1"), histIn("c1", "step", histReasoning("X")), histIn("x-end", "conclusion", histReasoning("X")))
	histAwaitEvent(alice, "X")
	histSendSeen(alice, histChat("m2"))
	liveRaw := map[string][]byte{}
	for _, want := range []string{"m1", "c1", "x-end", "ev:X", "m2"} {
		m := live.NextOf()
		if histLabel(m) != want || m.Str("protocol") != "mcpx/v0.1" {
			t.Fatalf("mx-live got %v, want %s in mcpx/v0.1", m, want)
		}
		liveRaw[want] = histRawOf(live, m.Str("id"))
	}
	check := func(who string, c *harness.Client, got []harness.Msg, want []string) {
		t.Helper()
		histEq(t, who, histLabels(got), want)
		for _, m := range got {
			if m.Str("protocol") != "mcpx/v0.1" {
				t.Errorf("%s: %s is replayed in %q", who, histLabel(m), m.Str("protocol"))
			}
			if raw := histRawOf(c, m.Str("id")); string(raw) != string(liveRaw[histLabel(m)]) {
				t.Errorf("%s: %s replayed as %s, live as %s", who, histLabel(m), raw, liveRaw[histLabel(m)])
			}
		}
	}
	topic, info, got := histDialQ(t, g, url.Values{"topic": {pod}, "participant": {"mx-topic"}, "history": {"all"}})
	if topic.Welcome.Str("protocol") != "mcpx/v0.1" || info["replayed"] != float64(4) {
		t.Fatalf("mx-topic's welcome: %v", topic.Welcome)
	}
	check("topic=, history=all", topic, got, []string{"m1", "x-end", "ev:X", "m2"})
	proto, _, got := histDialQ(t, g, url.Values{"pod": {pod}, "protocol": {"mcpx/v0.1"}, "participant": {"mx-proto"}, "history": {"all"}, "fold": {"0"}})
	check("protocol=mcpx/v0.1, fold=0", proto, got, []string{"m1", "c1", "x-end", "ev:X", "m2"})
	_, _, got = histJoin(t, g, pod, "mcpp", "history=all")
	for _, m := range got {
		if m.Str("protocol") != "mcpp/v0.1" {
			t.Errorf("an MCPP joiner gets %s in %q", histLabel(m), m.Str("protocol"))
		}
	}

	// gateway/history answers in the reader's protocol too.
	ans := histAsk(proto, "q1", map[string]any{"fold": false})
	if ans.Str("protocol") != "mcpx/v0.1" {
		t.Errorf("system/history to an MCPx participant in %q", ans.Str("protocol"))
	}
	for _, e := range ans.Payload()["envelopes"].([]any) {
		if p := e.(map[string]any)["protocol"]; p != "mcpx/v0.1" {
			t.Errorf("gateway/history gives an MCPx participant %v in %v", e, p)
		}
	}

	// A resume as MCPx.
	if err := live.Conn.Close(); err != nil {
		t.Fatal(err)
	}
	alice.AwaitPresence("leave", "mx-live", 5*time.Second)
	histSendSeen(alice, histChat("m3"))
	topic.ExpectEnvelope("chat", "m3")
	proto.ExpectEnvelope("chat", "m3")
	resumed, info, got := histDialQ(t, g, url.Values{"topic": {pod}, "participant": {"mx-live"}, "resume": {"m2"}})
	histEq(t, "MCPx resume", histLabels(got), []string{"m3"})
	histWantInfo(t, "mx-live", info, map[string]any{"resumed": true, "replayed": 1})
	if got[0].Str("protocol") != "mcpx/v0.1" {
		t.Fatalf("resumed in %q", got[0].Str("protocol"))
	}
	histLive(t, alice, "live", topic, proto, resumed)
}

// TestHistoryOutlivesParticipants: once everyone has left and the pod is
// gone (its contexts too), its history is still there: for a POST of
// gateway/history, and for a new joiner.
func TestHistoryOutlivesParticipants(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) {
		c.ContextTimeout = 300 * time.Millisecond
		c.ContextRetention = 200 * time.Millisecond
	})
	const pod = "hist-outlives"
	alice := g.Dial(t, pod, "alice", "echo=1")
	bob := g.Dial(t, pod, "bob", "")
	histSendSeen(alice, histChat("m1"), histIn("c1", "step", histReasoning("X")), histChat("m2"))
	histAwaitEvent(alice, "X")
	for _, c := range []*harness.Client{alice, bob} {
		if err := c.Conn.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The pod is gone (its context concluded and was forgotten); the
	// gateway drops idle pods every 10 seconds.
	harness.Eventually(t, 30*time.Second, "mcpp_pods back to 0", func() bool { return harness.Metric(t, g.URL, "mcpp_pods") == 0 })

	// Opened again, for a POST, from the history stream alone.
	res := histPost(t, g, pod, "tool", "application/json", `{"id":"q","kind":"gateway/history"}`)
	if len(res) != 1 || res[0]["id"] != "q" {
		t.Fatalf("POST gateway/history to a pod with nobody: %v", res)
	}
	answer, _ := res[0]["answer"].(map[string]any)
	histEq(t, "POST gateway/history", histAnswerLabels(t, answer), []string{"m1", "m2", "ev:X"})

	carol, info, got := histJoin(t, g, pod, "carol", "history=all")
	histEq(t, "a new joiner's history", histLabels(got), []string{"m1", "m2", "ev:X"})
	histWantInfo(t, "carol", info, map[string]any{"replayed": 3, "folded": 1, "collapsed": 0})
	_, _, got = histJoin(t, g, pod, "dan", "history=all&fold=0")
	histEq(t, "fold=0", histLabels(got), []string{"m1", "c1", "m2", "ev:X"})
	a2 := g.Dial(t, pod, "alice", "echo=1")
	// The ids are still taken.
	a2.Send(histChat("m1"))
	a2.ExpectErr("duplicate_id")
	histLive(t, a2, "live", carol)
}

// TestHistoryResumeAfterRestart: with --history-dir the history survives
// a restart of the gateway, and a participant resumes across it.
func TestHistoryResumeAfterRestart(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--history", "1000", "--history-dir", dir}
	p1 := harness.StartGatewayProc(t, nil, args...)
	const pod = "hist-restart"
	alice := p1.GW.Dial(t, pod, "alice", "echo=1")
	bob := p1.GW.Dial(t, pod, "bob", "")
	histSendSeen(alice, histChat("a1"), histChat("a2"))
	bob.ExpectEnvelope("chat", "a1")
	bob.ExpectEnvelope("chat", "a2") // bob saw a2 last
	histSendSeen(alice, histChat("a3"), histIn("a4", "step", histReasoning("R")), histChat("a5"))
	if err := p1.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p1.Exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the gateway did not exit on SIGTERM:\n%s", p1.Stderr)
	}

	p2 := harness.StartGatewayProc(t, nil, args...)
	bob2, info, got := histJoin(t, p2.GW, pod, "bob", "resume=a2")
	histEq(t, "resumed across the restart", histLabels(got), []string{"a3", "a4", "a5"})
	histWantInfo(t, "bob", info, map[string]any{"resumed": true, "replayed": 3})
	carol, _, got := histJoin(t, p2.GW, pod, "carol", "history=all")
	histEq(t, "history=all after the restart", histLabels(got), []string{"a1", "a2", "a3", "a4", "a5"})
	a2 := p2.GW.Dial(t, pod, "alice", "echo=1")
	a2.Send(histChat("a3"))
	a2.ExpectErr("duplicate_id")
	histLive(t, a2, "a6", bob2, carol)
	t.Logf("restarted in %s", p2.GW.URL)
}

// histCollect reads c, in a goroutine, until the envelope "end", and
// returns the seq of every "seq" envelope in the order received (nil
// when "end" does not come within d).
func histCollect(c *harness.Client, d time.Duration) <-chan []int {
	out := make(chan []int, 1)
	go func() {
		seqs := []int{}
		deadline := time.Now().Add(d)
		for {
			m := c.Next(time.Until(deadline))
			switch {
			case m == nil:
				out <- nil
				return
			case m.Kind() == "seq":
				seqs = append(seqs, harness.SeqOf(m))
			case m.Kind() == "end":
				out <- seqs
				return
			}
		}
	}()
	return out
}

// histContiguous reports the first place where seqs is not from, from+1,
// ..., to, or "" when it is exactly that.
func histContiguous(seqs []int, from, to int) string {
	for i, s := range seqs {
		if s != from+i {
			return fmt.Sprintf("envelope %d of %d has seq %d, want %d (a gap or a duplicate)", i, len(seqs), s, from+i)
		}
	}
	if want := to - from + 1; len(seqs) != want {
		return fmt.Sprintf("%d envelopes, want %d (seq %d to %d)", len(seqs), want, from, to)
	}
	return ""
}

// TestHistoryJoinDuringBurst: while a sender streams numbered envelopes,
// joiners with history=all, resumers and a late joiner with history=N
// join again and again: each sees one contiguous run (the replayed part,
// then the live part), with no gap and no duplicate.
func TestHistoryJoinDuringBurst(t *testing.T) {
	g := histOn(t, func(c *gateway.Config) { c.History = 10000; c.Rate = 1e6; c.Burst = 1e6 })
	const pod, n = "hist-burst", 2000
	alice := g.Dial(t, pod, "alice", "")
	obs := g.Dial(t, pod, "obs", "")
	obsSeqs := histCollect(obs, 60*time.Second)

	// The sender, paced so that the burst lasts a few seconds.
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		write := func(v any) bool {
			b, _ := json.Marshal(v)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := alice.Conn.Write(ctx, b); err != nil {
				t.Errorf("alice: write: %v", err)
				return false
			}
			return true
		}
		for i := 0; i < n; i++ {
			if !write(map[string]any{"id": fmt.Sprintf("s%d", i), "kind": "seq", "payload": map[string]any{"seq": i}}) {
				return
			}
			sent.Add(1)
			time.Sleep(time.Millisecond)
		}
		write(map[string]any{"id": "end", "kind": "end"})
	}()
	burstOn := func() bool {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	type joiner struct {
		what string
		from int // the first seq it must see
		seqs <-chan []int
		pre  []int // what a resumer saw before it dropped
	}
	var joiners []joiner
	midBurst := 0
	harness.Eventually(t, 10*time.Second, "the burst under way", func() bool { return sent.Load() >= 100 })

	// A late joiner with history=50, mid-burst.
	late := g.Dial(t, pod, "late", "history=50")
	lateInfo := histInfo(late)
	joiners = append(joiners, joiner{what: "history=50", from: -1, seqs: histCollect(late, 60*time.Second)})

	for i := 0; burstOn(); i++ {
		// A joiner with history=all: from seq 0.
		c := g.Dial(t, pod, fmt.Sprintf("all-%d", i), "history=all")
		if r, _ := histInfo(c)["replayed"].(float64); r > 0 && int(r) < n {
			midBurst++
		}
		joiners = append(joiners, joiner{what: c.ID, from: 0, seqs: histCollect(c, 60*time.Second)})

		// A resumer: joins with history=all, reads a while, drops, and
		// resumes from the last envelope it saw.
		id := fmt.Sprintf("resume-%d", i)
		r := g.Dial(t, pod, id, "history=all")
		var pre []int
		last := ""
		for len(pre) < 50+i*37%200 {
			m := r.Next(5 * time.Second)
			if m == nil {
				t.Fatalf("%s: nothing within 5s", id)
			}
			if m.Kind() == "seq" {
				pre = append(pre, harness.SeqOf(m))
				last = m.Str("id")
			}
			if m.Kind() == "end" {
				break
			}
		}
		if err := r.Conn.Close(); err != nil {
			t.Fatalf("%s: close: %v", id, err)
		}
		if last == "" || len(pre) == 0 || pre[len(pre)-1] == n-1 {
			continue // it saw it all before it dropped
		}
		r2 := g.Dial(t, pod, id, "resume="+last)
		if histInfo(r2)["resumed"] != true {
			t.Fatalf("%s: resume=%s: the welcome's history is %v", id, last, histInfo(r2))
		}
		joiners = append(joiners, joiner{what: id + " (resumed from " + last + ")", from: 0, pre: pre, seqs: histCollect(r2, 60*time.Second)})
	}

	if s := histContiguous(<-obsSeqs, 0, n-1); s != "" {
		t.Fatalf("obs, present from the start: %s", s)
	}
	for _, j := range joiners {
		seqs := <-j.seqs
		if seqs == nil {
			t.Errorf("%s: the end never came", j.what)
			continue
		}
		seqs = append(append([]int{}, j.pre...), seqs...)
		from := j.from
		if from < 0 && len(seqs) > 0 {
			from = seqs[0]
		}
		if s := histContiguous(seqs, from, n-1); s != "" {
			t.Errorf("%s: %s", j.what, s)
		}
	}
	if lateInfo["replayed"] != float64(50) {
		t.Errorf("the late joiner's welcome: %v, want 50 replayed", lateInfo)
	}
	t.Logf("%d joiners and resumers, %d with history=all joined mid-burst", len(joiners), midBurst)
	if midBurst < 3 {
		t.Errorf("only %d joiners joined mid-burst: the test proves little", midBurst)
	}
}

// TestHistoryJoinAfterAnAnswer: once a sender has been answered (here, a
// refusal of its next envelope), a participant that joins receives none
// of the envelopes sent before that answer live: a plain joiner's first
// envelope is the next one sent, and a joiner with history=all replays
// them and then receives that next one, with no gap and no duplicate.
// (The fan-out may still be delivering them when the join comes: the
// join waits for it.) With history off, as with it.
func TestHistoryJoinAfterAnAnswer(t *testing.T) {
	t.Parallel()
	for _, history := range []int{1000, 0} {
		t.Run(fmt.Sprintf("history=%d", history), func(t *testing.T) {
			t.Parallel()
			g := harness.StartGateway(t, func(c *gateway.Config) { c.History, c.Rate, c.Burst = history, 1e6, 1e6 })
			const pod, rounds, burst = "join-after-answer", 10, 40
			s := g.Dial(t, pod, "sender", "")
			var sent []string
			for r := 0; r < rounds; r++ {
				for i := 0; i < burst; i++ {
					id := fmt.Sprintf("r%d-%d", r, i)
					s.Send(map[string]any{"kind": "note", "id": id})
					sent = append(sent, id)
				}
				s.SendRaw([]byte(`{"kind":`))
				s.ExpectErr("invalid_json")
				plain := g.Dial(t, pod, fmt.Sprintf("plain-%d", r), "")
				var all *harness.Client
				if history > 0 {
					var replayed []harness.Msg
					all, _, replayed = histJoin(t, g, pod, fmt.Sprintf("all-%d", r), "history=all")
					histEq(t, fmt.Sprintf("round %d: history=all replayed", r), histLabels(replayed), sent)
				}
				next := fmt.Sprintf("next-%d", r)
				s.Send(map[string]any{"kind": "note", "id": next})
				sent = append(sent, next)
				for _, c := range []*harness.Client{plain, all} {
					if c == nil {
						continue
					}
					if m := c.NextNonPresence(5 * time.Second); m == nil || m.Str("id") != next {
						t.Fatalf("round %d: %s, joined after the answer, first got %v live, want %s", r, c.ID, m, next)
					}
					_ = c.Conn.Close()
				}
			}
		})
	}
}
