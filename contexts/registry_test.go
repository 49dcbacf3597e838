package contexts

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/wire"
)

// regStart is where every registry test's clock starts.
var regStart = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// regHarness drives one registry with a clock that only moves when told.
type regHarness struct {
	t   *testing.T
	r   *Registry
	now time.Time

	mu      sync.Mutex
	expired [][]string // each onExpire call: "id:reason" in event order
	// stats are the expired contexts' events, by id.
	stats map[string]Concluded
	// ancestors are the Ancestors of each expired or concluded context, as
	// the registry reports them for its events.
	ancestors map[string][]string
}

func newRegHarness(t *testing.T, edit func(*Config)) *regHarness {
	t.Helper()
	h := &regHarness{t: t, now: regStart, ancestors: map[string][]string{}, stats: map[string]Concluded{}}
	cfg := Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: 10 * time.Second, ContextRetention: time.Minute,
			MaxContextsPerParticipant: 256, MaxContextsPerPod: 10000,
			ContextRate: 1000, ContextBurst: 1000,
			ConclusionKinds: "conclusion,reasoning/end",
		},
		Now: func() time.Time { return h.clock() },
	}
	if edit != nil {
		edit(&cfg)
	}
	h.r = NewRegistry(cfg, func(cs []Concluded) {
		var ev []string
		for _, c := range cs {
			ev = append(ev, c.ID+":"+c.Reason)
			h.ancestors[c.ID] = c.Ancestors
			h.stats[c.ID] = c
		}
		h.expired = append(h.expired, ev)
	})
	t.Cleanup(h.r.Close)
	return h
}

func (h *regHarness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// advance moves the clock by d and returns the new time.
func (h *regHarness) advance(d time.Duration) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(d)
	return h.now
}

// expire moves the clock by d and runs the registry's expiry at that time.
func (h *regHarness) expire(d time.Duration) {
	h.r.Expire(h.advance(d))
}

// events returns and clears what onExpire reported.
func (h *regHarness) events() [][]string {
	h.r.mu.Lock() // onExpire runs with the registry locked
	defer h.r.mu.Unlock()
	ev := h.expired
	h.expired = nil
	return ev
}

// parse parses a context field as ingress does.
func (h *regHarness) parse(field string) envelope.Context {
	h.t.Helper()
	c, e := envelope.ParseContext([]byte(field), 4096)
	if e != nil {
		h.t.Fatalf("context %s does not parse: %v", field, e)
	}
	return c
}

// regResult is what one Accept did.
type regResult struct {
	err        *envelope.Error
	committed  bool
	ctx        *Context
	ancestors  []string
	concluded  []string            // "id:reason", in event order
	eventAnces map[string][]string // the Ancestors of each concluded context, in commit
	stats      map[string]Concluded
}

// send offers one envelope of kind from sender in the context field.
func (h *regHarness) send(field, kind, sender string) regResult {
	h.t.Helper()
	return h.sendReq(&Request{Context: h.parse(field), Kind: kind, Sender: sender, Size: 100, Now: h.clock()})
}

func (h *regHarness) sendReq(req *Request) regResult {
	var acc Accepted
	var res regResult
	res.err = h.r.Accept(req, &acc, func(a *Accepted) {
		res.committed = true
		res.ctx = a.Context
		res.ancestors = append([]string{}, a.Ancestors...)
		res.eventAnces = map[string][]string{}
		res.stats = map[string]Concluded{}
		for _, c := range a.Concluded {
			res.concluded = append(res.concluded, c.ID+":"+c.Reason)
			res.eventAnces[c.ID] = c.Ancestors
			res.stats[c.ID] = c
		}
	})
	if (res.err == nil) != res.committed {
		h.t.Fatalf("Accept returned %v but committed=%v", res.err, res.committed)
	}
	return res
}

// ok sends and fails unless the envelope is accepted.
func (h *regHarness) ok(field, kind, sender string) regResult {
	h.t.Helper()
	res := h.send(field, kind, sender)
	if res.err != nil {
		h.t.Fatalf("%s %s from %s: refused with %v", field, kind, sender, res.err)
	}
	return res
}

// refused sends and fails unless the envelope is refused with code.
func (h *regHarness) refused(field, kind, sender string, code wire.Code) *envelope.Error {
	h.t.Helper()
	res := h.send(field, kind, sender)
	if res.err == nil {
		h.t.Fatalf("%s %s from %s: accepted, want %s", field, kind, sender, code)
	}
	if res.err.Code != code {
		h.t.Fatalf("%s %s from %s: refused with %v, want %s", field, kind, sender, res.err, code)
	}
	return res.err
}

// info returns the one context the registry reports for id in state.
func (h *regHarness) info(id, state string) wire.ContextInfo {
	h.t.Helper()
	list := h.r.Query(Query{State: state, ID: id})
	if len(list) != 1 {
		h.t.Fatalf("query %s %q: %d contexts (%+v), want 1", state, id, len(list), list)
	}
	return list[0]
}

func (h *regHarness) counts(wantActive, wantRetained int) {
	h.t.Helper()
	if a, k := h.r.Counts(); a != wantActive || k != wantRetained {
		h.t.Fatalf("counts: %d active, %d retained; want %d and %d", a, k, wantActive, wantRetained)
	}
}

func strp(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func TestRegistryCreation(t *testing.T) {
	h := newRegHarness(t, nil)
	res := h.ok(`{"id":"r1","type":"reasoning","parent":"ctx-123","metadata":{"a":1}}`, "reflection", "alice")
	c := res.ctx
	if c.ID != "r1" || c.Type != "reasoning" || c.Parent != "ctx-123" || c.Creator != "alice" || c.Depth != 2 {
		t.Fatalf("created %+v", c)
	}
	if !reflect.DeepEqual(res.ancestors, []string{"ctx-123"}) {
		t.Fatalf("ancestors %v, want [ctx-123]", res.ancestors)
	}
	created := h.clock()
	h.advance(time.Second)
	// Later envelopes may repeat or omit type and parent; another sender
	// does not become the creator.
	h.ok(`{"id":"r1"}`, "reflection", "bob")
	h.ok(`{"id":"r1","type":"reasoning"}`, "reflection", "alice")
	h.advance(time.Second)
	last := h.ok(`{"id":"r1","parent":"ctx-123","type":"reasoning"}`, "reflection", "bob")
	if last.ctx != c {
		t.Fatal("a later envelope made a new context")
	}
	i := h.info("r1", wire.StateActive)
	want := wire.ContextInfo{
		ID: "r1", Depth: 2, State: wire.StateActive, Creator: "alice", Messages: 4, Bytes: 400,
		Participants: []string{"alice", "bob"},
		Created:      FormatTime(created.UnixNano()), LastActivity: FormatTime(h.clock().UnixNano()),
	}
	if strp(i.Type) != "reasoning" || strp(i.Parent) != "ctx-123" || i.Reason != nil || i.Concluded != nil {
		t.Fatalf("info %+v: type %s parent %s reason %s concluded %s", i, strp(i.Type), strp(i.Parent), strp(i.Reason), strp(i.Concluded))
	}
	i.Type, i.Parent = nil, nil
	if !reflect.DeepEqual(i, want) {
		t.Fatalf("info\n got %+v\nwant %+v", i, want)
	}
	// A root has depth 1 and no type or parent.
	h.ok(`{"id":"root"}`, "x", "carol")
	i = h.info("root", wire.StateActive)
	if i.Depth != 1 || i.Type != nil || i.Parent != nil || i.Creator != "carol" {
		t.Fatalf("root info %+v", i)
	}
	// A path names its parent implicitly.
	res = h.ok(`"a/b/c"`, "x", "carol")
	if res.ctx.Parent != "a/b" || res.ctx.Depth != 3 || !res.ctx.Path {
		t.Fatalf("path context %+v", res.ctx)
	}
	if !reflect.DeepEqual(res.ancestors, []string{"a/b", "a"}) {
		t.Fatalf("path ancestors %v, want [a/b a]", res.ancestors)
	}
	h.counts(3, 0)
}

func TestRegistryConflict(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"k","type":"reasoning","parent":"p"}`, "x", "alice")
	h.ok(`{"id":"untyped"}`, "x", "alice")
	h.ok(`"a/b"`, "x", "alice")
	for _, field := range []string{
		`{"id":"k","type":"workflow"}`,
		`{"id":"k","parent":"q"}`,
		`{"id":"k","type":"reasoning","parent":"q"}`,
		`{"id":"untyped","type":"reasoning"}`, // naming a type where none was registered
		`{"id":"untyped","parent":"p"}`,       // naming a parent of a root
		`{"id":"a/b","parent":"x"}`,           // the path's parent is a
	} {
		e := h.refused(field, "x", "bob", wire.CodeContextConflict)
		if e.Code.Retryable() {
			t.Fatal("context_conflict is not retryable")
		}
	}
	// Refused envelopes do not count.
	if i := h.info("k", wire.StateActive); i.Messages != 1 || len(i.Participants) != 1 {
		t.Fatalf("after refusals: %+v", i)
	}
	// The one-segment path "k" names no parent and no type: omissions, not
	// a conflict; k keeps its registered type and parent.
	res := h.ok(`"k"`, "x", "bob")
	if res.ctx.Type != "reasoning" || res.ctx.Parent != "p" {
		t.Fatalf("k is now %+v", res.ctx)
	}
	// An object naming the path's parent is the same context.
	h.ok(`{"id":"a/b","parent":"a"}`, "x", "bob")
}

func TestRegistryCycle(t *testing.T) {
	h := newRegHarness(t, nil)
	h.refused(`{"id":"self","parent":"self"}`, "x", "alice", wire.CodeContextCycle)
	if h.r.Query(Query{State: "all", ID: "self"}) != nil {
		t.Fatal("a refused context was registered")
	}
	h.ok(`{"id":"A","parent":"B"}`, "x", "alice") // B unknown: depth 2
	h.refused(`{"id":"B","parent":"A"}`, "x", "alice", wire.CodeContextCycle)
	h.refused(`{"id":"B","parent":"A","type":"t"}`, "x", "bob", wire.CodeContextCycle)
	// B as a root, or under another parent, is fine: A then hangs under B.
	h.ok(`{"id":"B"}`, "x", "alice")

	// A cycle through a long chain built from the leaf up closes far from
	// where it starts (with a depth limit that lets the chain be built).
	long := newRegHarness(t, func(c *Config) { c.MaxDepth = 12 })
	for i := 1; i <= 9; i++ {
		long.ok(fmt.Sprintf(`{"id":"c%d","parent":"c%d"}`, i, i+1), "x", "alice")
	}
	long.refused(`{"id":"c10","parent":"c1"}`, "x", "alice", wire.CodeContextCycle)
	long.ok(`{"id":"c10"}`, "x", "alice")

	// Mixed forms: x names parent x/y; the path x/y has parent x.
	h.ok(`{"id":"x","parent":"x/y"}`, "x", "alice")
	h.refused(`"x/y"`, "x", "alice", wire.CodeContextCycle)

	// Conflict is reported before cycle (the order of docs/protocol.md
	// section 5).
	h.refused(`{"id":"A","parent":"A"}`, "x", "alice", wire.CodeContextConflict)

	// A concluded context no longer closes a cycle: Q concludes, then P may
	// name Q as parent. Q reopened under P would close one (P names Q).
	h.ok(`{"id":"Q","parent":"P"}`, "conclusion", "alice")
	h.ok(`{"id":"P","parent":"Q"}`, "x", "alice")
	h.refused(`{"id":"Q","parent":"P"}`, "x", "alice", wire.CodeContextCycle)
	h.ok(`{"id":"Q"}`, "x", "alice")
}

// TestRegistryDepthFromTheLeafUp: docs/protocol.md section 3, a chain may be
// built from the leaf up, and depth counts the whole chain the registry
// knows, whichever order it was built in: announce C12 under C11, then C11
// under C10, and so on; each joins the chain below it, and the envelope that
// would make it longer than --max-depth is refused. Subtree ancestry and
// cascades cover every registered descendant.
func TestRegistryDepthFromTheLeafUp(t *testing.T) {
	h := newRegHarness(t, nil) // --max-depth 5
	for i := 12; i >= 9; i-- {
		h.ok(fmt.Sprintf(`{"id":"C%d","parent":"C%d"}`, i, i-1), "x", "alice")
	}
	// C9..C12 under an unknown C8 (a root at depth 1) are at depths 2..5.
	for i, want := range map[int]int{9: 2, 10: 3, 11: 4, 12: 5} {
		if d := h.info(fmt.Sprintf("C%d", i), wire.StateActive).Depth; d != want {
			t.Fatalf("C%d has depth %d, want %d", i, d, want)
		}
	}
	// C8 under an unknown C7 would put C12 at depth 6.
	h.refused(`{"id":"C8","parent":"C7"}`, "x", "alice", wire.CodeContextDepthExceeded)
	if h.r.Query(Query{State: "all", ID: "C8"}) != nil {
		t.Fatal("the refused C8 was registered")
	}
	// As a root it fits: C8 1, C9 2 … C12 5.
	h.ok(`{"id":"C8"}`, "x", "alice")
	if d := h.info("C12", wire.StateActive).Depth; d != 5 {
		t.Fatalf("C12 has depth %d under the root C8, want 5", d)
	}
	// An envelope in C12 carries its whole ancestry, to the root.
	res := h.ok(`{"id":"C12"}`, "x", "alice")
	if got, want := strings.Join(res.ancestors, ","), "C11,C10,C9,C8"; got != want {
		t.Fatalf("C12's ancestors %s, want %s", got, want)
	}
	// A child of C12 would be at depth 6.
	h.refused(`{"id":"C13","parent":"C12"}`, "x", "alice", wire.CodeContextDepthExceeded)
	// Concluding the root concludes every registered descendant.
	res = h.ok(`{"id":"C8"}`, "conclusion", "alice")
	if got := strings.Join(res.concluded, " "); got != "C8:conclusion C9:parent_concluded C10:parent_concluded C11:parent_concluded C12:parent_concluded" {
		t.Fatalf("the cascade: %s", got)
	}

	// Paths: a path's segments are its depth, and what hangs below one is
	// counted from it.
	h.ok(`{"id":"leaf","parent":"p/q/r/s/t"}`, "x", "alice")              // under an unknown parent: depth 2
	h.refused(`"p/q/r/s/t"`, "x", "alice", wire.CodeContextDepthExceeded) // depth 5, and leaf 6
	h.ok(`"p/q/r/s"`, "x", "alice")
	if d := h.info("leaf", wire.StateActive).Depth; d != 2 {
		t.Fatalf("leaf has depth %d, want 2 (its parent is still unknown)", d)
	}
}

func TestRegistryDepth(t *testing.T) {
	h := newRegHarness(t, nil)
	// Object chain of five.
	h.ok(`{"id":"d1"}`, "x", "alice")
	for i := 2; i <= 5; i++ {
		res := h.ok(fmt.Sprintf(`{"id":"d%d","parent":"d%d"}`, i, i-1), "x", "alice")
		if res.ctx.Depth != i {
			t.Fatalf("d%d has depth %d", i, res.ctx.Depth)
		}
	}
	e := h.refused(`{"id":"d6","parent":"d5"}`, "x", "alice", wire.CodeContextDepthExceeded)
	if !strings.Contains(e.Message, "6") {
		t.Fatalf("message %q does not say the depth", e.Message)
	}
	// Paths: n segments, depth n.
	if res := h.ok(`"a/b/c/d/e"`, "x", "alice"); res.ctx.Depth != 5 {
		t.Fatalf("a/b/c/d/e has depth %d", res.ctx.Depth)
	}
	h.refused(`"a/b/c/d/e/f"`, "x", "alice", wire.CodeContextDepthExceeded)
	h.refused(`"f/e/d/c/b/a"`, "x", "alice", wire.CodeContextDepthExceeded)
	// An unknown parent counts as a root at depth 1.
	if res := h.ok(`{"id":"u2","parent":"nowhere"}`, "x", "alice"); res.ctx.Depth != 2 {
		t.Fatalf("u2 has depth %d", res.ctx.Depth)
	}
	for i := 3; i <= 5; i++ {
		h.ok(fmt.Sprintf(`{"id":"u%d","parent":"u%d"}`, i, i-1), "x", "alice")
	}
	h.refused(`{"id":"u6","parent":"u5"}`, "x", "alice", wire.CodeContextDepthExceeded)
	// Mixing the forms cannot get around the limit: a path under a
	// registered deep object counts the registered depth.
	h.ok(`{"id":"m","parent":"u3"}`, "x", "alice") // depth 4
	if res := h.ok(`"m/n"`, "x", "alice"); res.ctx.Depth != 5 {
		t.Fatalf("m/n has depth %d, want 5", res.ctx.Depth)
	}
	h.refused(`"m/n/o"`, "x", "alice", wire.CodeContextDepthExceeded)
	// Depth exceeded is reported before the caps.
	h2 := newRegHarness(t, func(c *Config) { c.MaxDepth = 2; c.MaxContextsPerPod = 1 })
	h2.ok(`"p"`, "x", "alice")
	h2.refused(`"p/q/r"`, "x", "alice", wire.CodeContextDepthExceeded)
	h2.refused(`"p/q"`, "x", "alice", wire.CodeContextLimitExceeded)
}

func TestRegistryCaps(t *testing.T) {
	h := newRegHarness(t, func(c *Config) { c.MaxContextsPerParticipant = 2; c.MaxContextsPerPod = 3 })
	h.ok(`{"id":"a1"}`, "x", "alice")
	h.ok(`{"id":"a2"}`, "x", "alice")
	e := h.refused(`{"id":"a3"}`, "x", "alice", wire.CodeContextLimitExceeded)
	if !e.Code.Retryable() || e.Details["scope"] != "participant" || e.Details["limit"] != 2 {
		t.Fatalf("participant cap error %+v", e)
	}
	// Envelopes in existing contexts, also others', are not new contexts.
	h.ok(`{"id":"a1"}`, "x", "alice")
	h.ok(`{"id":"b1"}`, "x", "bob")
	h.ok(`{"id":"a2"}`, "x", "bob")
	e = h.refused(`{"id":"b2"}`, "x", "bob", wire.CodeContextLimitExceeded)
	if e.Details["scope"] != "pod" || e.Details["limit"] != 3 {
		t.Fatalf("pod cap error %+v", e)
	}
	h.counts(3, 0)
	// A concluded context no longer counts against its creator or the pod.
	h.ok(`{"id":"a1"}`, "conclusion", "bob")
	h.ok(`{"id":"a3"}`, "x", "alice")
	h.refused(`{"id":"a4"}`, "x", "alice", wire.CodeContextLimitExceeded)
	// Nor does a context that timed out.
	h.expire(11 * time.Second)
	h.counts(0, 3) // four concluded; MaxContextsPerPod bounds the retained ones too
	h.ok(`{"id":"a4"}`, "x", "alice")
	h.ok(`{"id":"a5"}`, "x", "alice")
	h.ok(`{"id":"b2"}`, "x", "bob")
}

func TestRegistryRates(t *testing.T) {
	h := newRegHarness(t, func(c *Config) { c.ContextRate, c.ContextBurst = 1, 2 })
	h.ok(`{"id":"r"}`, "x", "alice")
	h.ok(`{"id":"r"}`, "x", "bob")
	e := h.refused(`{"id":"r"}`, "x", "carol", wire.CodeContextRateLimited)
	if e.RetryAfter <= 0 || !e.Code.Retryable() {
		t.Fatalf("context rate error %+v", e)
	}
	if i := h.info("r", wire.StateActive); i.Messages != 2 {
		t.Fatalf("a refused envelope counted: %+v", i)
	}
	h.advance(time.Second)
	h.ok(`{"id":"r"}`, "x", "carol")

	// The sender's own rate comes after the context errors before it in
	// the table of docs/protocol.md section 5 and before context_rate_limited.
	senderRate := limits.RateError(wire.CodeRateLimited, time.Second, "slow down")
	req := &Request{Context: h.parse(`{"id":"r","type":"other"}`), Kind: "x", Sender: "alice", Size: 1, Now: h.clock(), SenderRate: senderRate}
	if res := h.sendReq(req); res.err == nil || res.err.Code != wire.CodeContextConflict {
		t.Fatalf("conflict with a sender over its rate: %v", res.err)
	}
	req = &Request{Context: h.parse(`{"id":"r"}`), Kind: "x", Sender: "alice", Size: 1, Now: h.clock(), SenderRate: senderRate}
	// r's bucket is empty now (carol took the refilled token).
	if res := h.sendReq(req); res.err != senderRate {
		t.Fatalf("sender over its rate in a context over its rate: %v, want rate_limited", res.err)
	}
	req.Context = h.parse(`{"id":"new"}`)
	if res := h.sendReq(req); res.err != senderRate {
		t.Fatalf("sender over its rate opening a context: %v", res.err)
	}
	if h.r.Query(Query{State: "all", ID: "new"}) != nil {
		t.Fatal("a context was created by a refused envelope")
	}

	// The creation bucket.
	create := limits.Rate{Per: 1, Burst: 1}.NewLimiter()
	req = &Request{Context: h.parse(`{"id":"c1"}`), Kind: "x", Sender: "dave", Size: 1, Now: h.clock(), Create: create}
	if res := h.sendReq(req); res.err != nil {
		t.Fatal(res.err)
	}
	req.Context = h.parse(`{"id":"c2"}`)
	if res := h.sendReq(req); res.err == nil || res.err.Code != wire.CodeContextRateLimited || res.err.RetryAfter <= 0 {
		t.Fatalf("second context over the create burst: %v", res.err)
	}
	req.Context = h.parse(`{"id":"c1"}`) // an existing context takes no creation token
	if res := h.sendReq(req); res.err != nil {
		t.Fatal(res.err)
	}
}

func TestRegistryTimeoutLazyHeap(t *testing.T) {
	h := newRegHarness(t, nil) // timeout 10s
	t0 := h.clock()
	h.ok(`{"id":"busy"}`, "x", "alice")
	h.ok(`{"id":"idle"}`, "x", "alice")
	h.advance(6 * time.Second)
	h.ok(`{"id":"busy"}`, "x", "bob") // pushes busy's deadline to t0+16s
	// A refused envelope does not keep a context alive.
	h.refused(`{"id":"idle","type":"other"}`, "x", "bob", wire.CodeContextConflict)
	if d := h.r.timeouts[0].deadline; d != t0.Add(10*time.Second).UnixNano() {
		t.Fatalf("activity moved the heap (deadline %v): it must only move LastActivity", time.Unix(0, d))
	}

	h.expire(4*time.Second - time.Nanosecond)
	if ev := h.events(); ev != nil {
		t.Fatalf("concluded before the timeout: %v", ev)
	}
	h.expire(time.Nanosecond) // t0+10s
	if ev := h.events(); !reflect.DeepEqual(ev, [][]string{{"idle:timeout"}}) {
		t.Fatalf("at t0+10s: %v, want idle by timeout", ev)
	}
	// busy was looked at and rescheduled to its new deadline.
	if len(h.r.timeouts) != 1 || h.r.timeouts[0].deadline != t0.Add(16*time.Second).UnixNano() {
		t.Fatalf("busy is not rescheduled to t0+16s: %+v", h.r.timeouts)
	}
	i := h.info("idle", wire.StateConcluded)
	if strp(i.Reason) != wire.ReasonTimeout || strp(i.Concluded) != FormatTime(t0.Add(10*time.Second).UnixNano()) ||
		i.LastActivity != FormatTime(t0.UnixNano()) || i.Messages != 1 {
		t.Fatalf("idle: %+v reason %s concluded %s", i, strp(i.Reason), strp(i.Concluded))
	}

	h.advance(5 * time.Second) // t0+15s
	h.ok(`{"id":"busy"}`, "x", "alice")
	h.expire(time.Second) // t0+16s: busy's old deadline, but it was active at t0+15s
	if ev := h.events(); ev != nil {
		t.Fatalf("at t0+16s: %v, want nothing", ev)
	}
	h.expire(9*time.Second - time.Nanosecond)
	if ev := h.events(); ev != nil {
		t.Fatalf("just before t0+25s: %v", ev)
	}
	h.expire(time.Nanosecond)
	if ev := h.events(); !reflect.DeepEqual(ev, [][]string{{"busy:timeout"}}) {
		t.Fatalf("at t0+25s: %v", ev)
	}
	i = h.info("busy", wire.StateConcluded)
	if i.Messages != 3 || i.Bytes != 300 || !reflect.DeepEqual(i.Participants, []string{"alice", "bob"}) {
		t.Fatalf("busy stats %+v", i)
	}
	h.counts(0, 2)
}

func TestRegistryTimeoutOrder(t *testing.T) {
	h := newRegHarness(t, nil)
	// Created in one order, last active in another: each concludes when its
	// own last activity is a timeout old, not when its first deadline comes.
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		h.ok(`{"id":"`+id+`"}`, "x", "alice")
		h.advance(time.Millisecond)
	}
	order := []string{"c3", "c1", "c4", "c2"}
	for _, id := range order {
		h.advance(time.Second)
		h.ok(`{"id":"`+id+`"}`, "x", "alice")
	}
	// Now t0+4.004s; c3 was last active at t0+1.004s.
	h.expire(7*time.Second + 500*time.Millisecond)
	for i, id := range order {
		if ev := h.events(); !reflect.DeepEqual(ev, [][]string{{id + ":timeout"}}) {
			t.Fatalf("sweep %d: %v, want %s alone", i, ev, id)
		}
		h.expire(time.Second)
	}
	h.counts(0, 4)
}

func TestRegistryChildActivityKeepsParentsAlive(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"p"}`, "x", "alice")
	h.ok(`{"id":"c","parent":"p"}`, "x", "alice")
	h.ok(`"p2"`, "x", "alice")
	h.ok(`"p2/c"`, "x", "alice")
	for i := 0; i < 5; i++ {
		h.advance(5 * time.Second)
		h.ok(`{"id":"c"}`, "x", "alice")
		h.ok(`"p2/c"`, "x", "alice")
		h.expire(0)
		if ev := h.events(); ev != nil {
			t.Fatalf("after %ds: %v", 5*(i+1), ev)
		}
	}
	// The parent's own counters did not move.
	if i := h.info("p", wire.StateActive); i.Messages != 1 {
		t.Fatalf("p: %+v", i)
	}
	h.expire(10 * time.Second)
	for _, ev := range h.events() {
		for _, e := range ev {
			if e == "c:parent_concluded" || e == "p2/c:parent_concluded" {
				// Parent and child were last active at the same moment; the
				// child may go with its parent.
				continue
			}
			if !strings.HasSuffix(e, ":timeout") {
				t.Fatalf("unexpected event %s", e)
			}
		}
	}
	h.counts(0, 4)
}

func TestRegistryRealTimer(t *testing.T) {
	got := make(chan []string, 4)
	r := NewRegistry(Config{
		Contexts: limits.Contexts{
			MaxDepth: 5, ContextTimeout: 30 * time.Millisecond, ContextRetention: 50 * time.Millisecond,
			MaxContextsPerParticipant: 10, MaxContextsPerPod: 10, ContextRate: 100, ContextBurst: 100,
		},
	}, func(cs []Concluded) {
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.ID+":"+c.Reason)
		}
		got <- ids
	})
	defer r.Close()
	var acc Accepted
	req := &Request{Context: envelope.Context{ID: "t"}, Kind: "x", Sender: "a", Size: 1, Now: time.Now()}
	if e := r.Accept(req, &acc, func(*Accepted) {}); e != nil {
		t.Fatal(e)
	}
	select {
	case ids := <-got:
		if !reflect.DeepEqual(ids, []string{"t:timeout"}) {
			t.Fatalf("timer concluded %v", ids)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the registry's timer never concluded the context")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !r.Empty() {
		if time.Now().After(deadline) {
			t.Fatal("the registry's timer never forgot the concluded context")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRegistryCascade(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"R","type":"reasoning"}`, "x", "alice")
	h.ok(`{"id":"C1","parent":"R"}`, "x", "alice")
	h.ok(`{"id":"C2","parent":"R"}`, "x", "bob")
	h.ok(`{"id":"G1","parent":"C1"}`, "x", "alice")
	h.ok(`{"id":"G2","parent":"C2"}`, "x", "alice")
	h.ok(`{"id":"H","parent":"G1"}`, "x", "alice")
	h.ok(`{"id":"other"}`, "x", "alice")
	h.ok(`{"id":"early","parent":"C1"}`, "conclusion", "alice") // concluded on its own
	h.advance(time.Second)
	res := h.ok(`{"id":"R"}`, "reasoning/end", "bob")
	if len(res.concluded) != 6 || res.concluded[0] != "R:conclusion" {
		t.Fatalf("concluded %v", res.concluded)
	}
	parents := map[string]string{"C1": "R", "C2": "R", "G1": "C1", "G2": "C2", "H": "G1"}
	pos := map[string]int{}
	for i, e := range res.concluded {
		id, reason, _ := strings.Cut(e, ":")
		pos[id] = i
		if id != "R" && reason != wire.ReasonParentConcluded {
			t.Fatalf("%s concluded with %s", id, reason)
		}
		if p, ok := parents[id]; ok {
			if pp, seen := pos[p]; !seen || pp > i {
				t.Fatalf("%s's event comes before its parent %s's: %v", id, p, res.concluded)
			}
		}
	}
	// The events' ancestors are those of an envelope just before: a
	// subtree filter on R admits H's event.
	wantAnc := map[string][]string{"R": nil, "C1": {"R"}, "C2": {"R"}, "G1": {"C1", "R"}, "G2": {"C2", "R"}, "H": {"G1", "C1", "R"}}
	for id, want := range wantAnc {
		if got := res.eventAnces[id]; !reflect.DeepEqual(got, want) {
			t.Errorf("ancestors of %s's event: %v, want %v", id, got, want)
		}
	}
	concludedAt := FormatTime(h.clock().UnixNano())
	for id := range parents {
		if i := h.info(id, wire.StateConcluded); strp(i.Concluded) != concludedAt {
			t.Fatalf("%s concluded at %s, want %s", id, strp(i.Concluded), concludedAt)
		}
	}
	h.counts(1, 7)
	if i := h.info("other", wire.StateActive); i.State != wire.StateActive {
		t.Fatal("an unrelated context concluded")
	}

	// A cascade by timeout, through the registry's onExpire.
	h.ok(`{"id":"T"}`, "x", "alice")
	h.ok(`"T"`, "x", "alice")
	h.ok(`"T/a"`, "x", "alice")
	h.ok(`"T/a/b"`, "x", "alice")
	h.ok(`{"id":"Tc","parent":"T/a/b"}`, "x", "alice")
	h.advance(5 * time.Second)
	h.ok(`{"id":"Tc"}`, "x", "alice")                       // keeps all of T alive
	h.ok(`{"id":"orphan","parent":"T/a/b/zz"}`, "x", "bob") // unknown parent: not in T's subtree
	h.expire(10*time.Second - time.Nanosecond)
	if ev := h.events(); len(ev) != 1 || ev[0][0] != "other:timeout" {
		t.Fatalf("first sweep %v", ev)
	}
	h.expire(time.Nanosecond)
	ev := h.events()
	if len(ev) != 1 {
		t.Fatalf("second sweep %v", ev)
	}
	// T, T/a, T/a/b and Tc were last active together; the sweep takes
	// whichever heap entry comes first, and the others follow it.
	seen := map[string]bool{}
	for _, e := range ev[0] {
		id, reason, _ := strings.Cut(e, ":")
		seen[id] = true
		if reason == wire.ReasonParentConcluded {
			var parent string
			switch id {
			case "T/a":
				parent = "T"
			case "T/a/b":
				parent = "T/a"
			case "Tc":
				parent = "T/a/b"
			}
			if !seen[parent] {
				t.Fatalf("%s concluded by its parent before the parent's event: %v", id, ev[0])
			}
		}
	}
	if len(seen) != 5 || !seen["orphan"] {
		t.Fatalf("second sweep %v", ev[0])
	}
	if got := h.ancestors["Tc"]; !reflect.DeepEqual(got, []string{"T/a/b", "T/a", "T"}) {
		t.Fatalf("ancestors of Tc's event %v", got)
	}
}

func TestRegistryAncestorsOfALaterConclusion(t *testing.T) {
	h := newRegHarness(t, nil)
	// P concludes first; K was created under P's id while P was concluded,
	// so its envelopes carry only [P]; so does its event.
	h.ok(`{"id":"G"}`, "x", "alice")
	h.ok(`{"id":"P","parent":"G"}`, "conclusion", "alice")
	res := h.ok(`{"id":"K","parent":"P"}`, "x", "alice")
	if !reflect.DeepEqual(res.ancestors, []string{"P"}) {
		t.Fatalf("K's ancestors %v", res.ancestors)
	}
	h.advance(time.Second)
	res = h.ok(`{"id":"K"}`, "conclusion", "alice")
	if got := res.eventAnces["K"]; !reflect.DeepEqual(got, []string{"P"}) {
		t.Fatalf("K's event ancestors %v, want [P]", got)
	}
}

func TestRegistryRetention(t *testing.T) {
	h := newRegHarness(t, nil) // timeout 10s, retention 1m
	h.ok(`{"id":"a"}`, "conclusion", "alice")
	h.advance(30 * time.Second)
	h.ok(`{"id":"b"}`, "conclusion", "alice")
	h.ok(`{"id":"live"}`, "x", "alice")
	h.counts(1, 2)
	h.expire(30*time.Second - time.Nanosecond) // live times out in this sweep
	if len(h.r.Query(Query{State: wire.StateConcluded})) != 3 {
		t.Fatal("a forgotten before its retention")
	}
	h.expire(time.Nanosecond) // +60s: a's retention ends
	concludedIDs := func() string {
		var s []string
		for _, i := range h.r.Query(Query{State: wire.StateConcluded}) {
			s = append(s, i.ID)
		}
		return strings.Join(s, ",")
	}
	if got := concludedIDs(); got != "b,live" {
		t.Fatalf("after a's retention: %s", got)
	}
	if h.r.Query(Query{State: "all", ID: "a"}) != nil {
		t.Fatal("a is still queryable")
	}
	h.expire(30 * time.Second) // +90s: b's
	if got := concludedIDs(); got != "live" {
		t.Fatalf("after b's retention: %s", got)
	}
	h.counts(0, 1)
	h.expire(30 * time.Second) // +120s: live's
	if !h.r.Empty() {
		t.Fatal("the registry is not empty after every retention")
	}
	h.counts(0, 0)

	// Retained contexts are bounded by MaxContextsPerPod as well: the oldest go.
	h2 := newRegHarness(t, func(c *Config) { c.MaxContextsPerPod = 3 })
	for i := 0; i < 5; i++ {
		h2.ok(fmt.Sprintf(`{"id":"r%d"}`, i), "conclusion", "alice")
		h2.advance(time.Millisecond)
	}
	list := h2.r.Query(Query{State: wire.StateConcluded})
	var ids []string
	for _, i := range list {
		ids = append(ids, i.ID)
	}
	if !reflect.DeepEqual(ids, []string{"r2", "r3", "r4"}) {
		t.Fatalf("retained %v, want the three newest", ids)
	}
}

func TestRegistryReopen(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"re","type":"reasoning","parent":"p"}`, "x", "alice")
	h.ok(`{"id":"re"}`, "x", "bob")
	first := h.ok(`{"id":"re"}`, "conclusion", "alice")
	if !reflect.DeepEqual(first.concluded, []string{"re:conclusion"}) {
		t.Fatalf("concluded %v", first.concluded)
	}
	if first.ctx.Messages != 3 {
		t.Fatalf("messages %d", first.ctx.Messages)
	}
	h.advance(time.Second)
	// Naming the concluded id opens a new context, which may have another
	// type and parent and another creator.
	res := h.ok(`{"id":"re","type":"workflow"}`, "x", "carol")
	if res.ctx == first.ctx || res.ctx.Messages != 1 || res.ctx.Type != "workflow" || res.ctx.Parent != "" ||
		res.ctx.Creator != "carol" || res.ctx.Depth != 1 || res.ctx.State != wire.StateActive {
		t.Fatalf("reopened %+v", res.ctx)
	}
	h.refused(`{"id":"re","type":"reasoning"}`, "x", "alice", wire.CodeContextConflict)
	// Both are queryable: the concluded one until its retention.
	all := h.r.Query(Query{State: "all", ID: "re"})
	if len(all) != 2 || all[0].State != wire.StateConcluded || all[0].Messages != 3 || all[1].State != wire.StateActive || all[1].Messages != 1 {
		t.Fatalf("all re: %+v", all)
	}
	h.expire(58 * time.Second) // t0+59s: the new one timed out (idle since t0+1s)
	h.counts(0, 2)
	h.expire(time.Second) // t0+60s: the first one's retention ends
	all = h.r.Query(Query{State: "all", ID: "re"})
	if len(all) != 1 || strp(all[0].Type) != "workflow" || strp(all[0].Reason) != wire.ReasonTimeout {
		t.Fatalf("after the first's retention: %+v", all)
	}
	// The reopened one is retained until its own retention.
	h.expire(58 * time.Second)
	h.counts(0, 1)
	h.expire(time.Second)
	if !h.r.Empty() {
		t.Fatal("not empty")
	}
	// And the id can be reopened again.
	if res := h.ok(`{"id":"re"}`, "conclusion", "dave"); res.ctx.Messages != 1 {
		t.Fatalf("third incarnation %+v", res.ctx)
	}
}

func TestRegistryQuery(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"q1","type":"reasoning"}`, "x", "alice")
	h.advance(time.Millisecond)
	h.ok(`{"id":"q2","type":"workflow","parent":"q1"}`, "x", "bob")
	h.advance(time.Millisecond)
	h.ok(`{"id":"q3","type":"reasoning"}`, "conclusion", "alice")
	h.advance(time.Millisecond)
	h.ok(`"q4"`, "x", "alice")
	ids := func(q Query) string {
		var s []string
		for _, i := range h.r.Query(q) {
			s = append(s, i.ID)
		}
		return strings.Join(s, ",")
	}
	for _, c := range []struct {
		q    Query
		want string
	}{
		{Query{State: wire.StateActive}, "q1,q2,q4"},
		{Query{State: wire.StateConcluded}, "q3"},
		{Query{State: "all"}, "q1,q2,q3,q4"},
		{Query{State: "all", Type: "reasoning"}, "q1,q3"},
		{Query{State: wire.StateActive, Type: "reasoning"}, "q1"},
		{Query{State: "all", ID: "q2"}, "q2"},
		{Query{State: wire.StateConcluded, ID: "q2"}, ""},
		{Query{State: wire.StateActive, ID: "q3"}, ""},
		{Query{State: "all", Limit: 2}, "q1,q2"},
		{Query{State: "all", ID: "nope"}, ""},
	} {
		if got := ids(c.q); got != c.want {
			t.Errorf("%+v: %s, want %s", c.q, got, c.want)
		}
	}
}

func TestRegistryCompacts(t *testing.T) {
	h := newRegHarness(t, func(c *Config) { c.MaxContextsPerParticipant = 1 << 20; c.MaxContextsPerPod = 1 << 20 })
	for i := 0; i < 5000; i++ {
		h.ok(fmt.Sprintf(`{"id":"c%d","parent":"p%d"}`, i, i), "x", fmt.Sprintf("s%d", i))
	}
	h.ok(`{"id":"keep"}`, "x", "alice")
	h.expire(5 * time.Second)
	h.ok(`{"id":"keep"}`, "x", "alice")
	h.expire(5 * time.Second) // the 5000 time out, keep does not
	h.expire(time.Minute)     // and are forgotten
	h.counts(0, 1)            // keep timed out in the last sweep too
	if h.r.peakByID > compactBelow || h.r.peakKids > compactBelow || h.r.peakCreators > compactBelow {
		t.Fatalf("maps not rebuilt: peaks %d %d %d", h.r.peakByID, h.r.peakKids, h.r.peakCreators)
	}
	if cap(h.r.timeouts) > compactBelow || cap(h.r.retained) > compactBelow {
		t.Fatalf("slices not rebuilt: caps %d %d", cap(h.r.timeouts), cap(h.r.retained))
	}
	// Still consistent afterwards.
	h.ok(`{"id":"again","parent":"keep"}`, "x", "alice")
	h.ok(`{"id":"again2","parent":"again"}`, "conclusion", "alice")
	h.counts(1, 2)
}

func TestRegistryErrorsAreEnvelopeErrors(t *testing.T) {
	h := newRegHarness(t, nil)
	h.ok(`{"id":"z","type":"t"}`, "x", "alice")
	res := h.send(`{"id":"z","type":"u"}`, "x", "alice")
	var err error = res.err
	var ee *envelope.Error
	if !errors.As(err, &ee) || ee.Code != wire.CodeContextConflict || ee.Message == "" {
		t.Fatalf("%v", err)
	}
}

// TestRegistryTokens: each context's tokens are its own envelopes'
// estimates, summed; at its conclusion, tokens_folded is all but its
// conclusion-kind envelopes' and tokens_saved that less theirs, in its
// event, gateway/contexts and after an envelope another node accepted.
func TestRegistryTokens(t *testing.T) {
	h := newRegHarness(t, nil)
	send := func(field, kind string, tokens int) regResult {
		t.Helper()
		res := h.sendReq(&Request{Context: h.parse(field), Kind: kind, Sender: "alice", Size: 100, Tokens: tokens, Now: h.clock()})
		if res.err != nil {
			t.Fatalf("%s %s: %v", field, kind, res.err)
		}
		return res
	}
	figures := func(c Concluded) [3]int64 { return [3]int64{c.Tokens, c.TokensFolded, c.TokensSaved} }

	send(`{"id":"task"}`, "note", 40)
	send(`{"id":"r","parent":"task"}`, "reasoning/step", 300)
	send(`{"id":"r"}`, "reasoning/step", 200)
	send(`{"id":"c","parent":"task"}`, "note", 70)
	// A sub-context's envelopes count in its own figures, not its parent's.
	if i := h.info("task", wire.StateActive); i.Tokens != 40 || i.TokensFolded != nil || i.TokensSaved != nil {
		t.Fatalf("active task: tokens %d, folded %v, saved %v; want 40, null, null", i.Tokens, i.TokensFolded, i.TokensSaved)
	}
	if i := h.info("r", wire.StateActive); i.Tokens != 500 {
		t.Fatalf("active r: %d tokens, want 500", i.Tokens)
	}

	res := send(`{"id":"r"}`, "conclusion", 60)
	if got := figures(res.stats["r"]); got != [3]int64{560, 500, 440} {
		t.Fatalf("r's event: tokens, folded, saved %v; want 560 500 440", got)
	}
	i := h.info("r", wire.StateConcluded)
	if i.Tokens != 560 || i.TokensFolded == nil || *i.TokensFolded != 500 || *i.TokensSaved != 440 {
		t.Fatalf("concluded r in gateway/contexts: %d %v %v", i.Tokens, i.TokensFolded, i.TokensSaved)
	}

	// task's conclusion concludes c with it: c had no conclusion, all of
	// it is folded and saved; task's conclusion costs more than the rest
	// of it, so it saves less than nothing.
	res = send(`{"id":"task"}`, "conclusion", 50)
	if got := res.concluded; strings.Join(got, " ") != "task:conclusion c:parent_concluded" {
		t.Fatalf("cascade: %v", got)
	}
	if got := figures(res.stats["task"]); got != [3]int64{90, 40, -10} {
		t.Fatalf("task's event: %v, want 90 40 -10", got)
	}
	if got := figures(res.stats["c"]); got != [3]int64{70, 70, 70} {
		t.Fatalf("c's event: %v, want 70 70 70", got)
	}

	// A timeout folds everything.
	send(`{"id":"idle"}`, "note", 33)
	h.expire(11 * time.Second)
	if got := figures(h.stats["idle"]); got != [3]int64{33, 33, 33} {
		t.Fatalf("timed out: %v, want 33 33 33", got)
	}

	// Another node's envelopes count the same.
	remote := h.parse(`{"id":"far"}`)
	h.r.ApplyRemote(&remote, false, "bob", "e1", 100, 120, h.clock())
	out := h.r.ApplyRemote(&remote, true, "bob", "e2", 100, 20, h.clock())
	if len(out) != 1 || figures(out[0]) != [3]int64{140, 120, 100} {
		t.Fatalf("remote conclusion: %+v, want 140 120 100", out)
	}
}
