package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// roundTrip decodes literal (JSON as docs/protocol.md writes it) into a
// T, encodes that again, and checks that the result means the same JSON as
// literal and that decoding and encoding it again changes nothing (raw
// JSON fields keep the white space they were received with, so the first
// decoding may differ in that alone).
func roundTrip[T any](t *testing.T, literal string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(literal), &v); err != nil {
		t.Fatalf("decode %s: %v", literal, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode %+v: %v", v, err)
	}
	sameJSON(t, out, literal)
	var again T
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	out2, err := json.Marshal(again)
	if err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("encoded again differently:\n %s\n %s (%v)", out, out2, err)
	}
	return v
}

// sameJSON checks that got and want are the same JSON value.
func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("not JSON: %s", got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the test's JSON is not JSON: %s", want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON differs:\n got  %s\n want %s", got, compact(want))
	}
}

func compact(s string) string {
	var b bytes.Buffer
	_ = json.Compact(&b, []byte(s))
	return b.String()
}

// Section 2: the envelope, written back in the section's order, on one
// line.
func TestEnvelopeSection2(t *testing.T) {
	const literal = `{"protocol": "mcpp/v0.1", "id": "2f6b", "ts": "2026-11-22T10:00:00.123Z",
 "from": "alice", "to": ["bob"], "kind": "mcp/request:tools/call",
 "correlation_id": "env-1",
 "context": {"id": "reason-789", "type": "reasoning", "parent": "ctx-123", "metadata": {}},
 "payload": {}}`
	e := roundTrip[Envelope](t, literal)
	if e.Protocol != ProtocolMCPP || e.ID != "2f6b" || e.From != "alice" || e.Kind != "mcp/request:tools/call" ||
		!slices.Equal(e.To, []string{"bob"}) || !e.CorrelationID.Has("env-1") || e.Lifecycle != nil {
		t.Fatalf("decoded %+v", e)
	}
	out, _ := json.Marshal(e)
	if string(out) != compact(literal) {
		t.Fatalf("not written in section 2's order, on one line:\n got  %s\n want %s", out, compact(literal))
	}
	c, err := ParseContext(e.Context)
	if err != nil || c.ID != "reason-789" || c.Type != "reasoning" || c.Parent != "ctx-123" || string(c.Metadata) != "{}" {
		t.Fatalf("context %+v, %v", c, err)
	}
	if e.ContextID() != "reason-789" || !e.InHistory() || e.IsSystem() {
		t.Fatalf("ContextID %q InHistory %v IsSystem %v", e.ContextID(), e.InHistory(), e.IsSystem())
	}
}

// What a sender writes: only kind is required, and empty fields stay out.
func TestEnvelopeMinimal(t *testing.T) {
	e, err := NewEnvelope("chat", map[string]string{"text": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(e)
	if string(out) != `{"kind":"chat","payload":{"text":"hello"}}` {
		t.Fatalf("got %s", out)
	}
	roundTrip[Envelope](t, `{"kind":"chat"}`)
	// payload may be null, and null stays.
	e2 := roundTrip[Envelope](t, `{"kind":"chat","payload":null}`)
	if string(e2.Payload) != "null" {
		t.Fatalf("payload %q", e2.Payload)
	}
}

// Section 2: unknown top-level fields are relayed as sent, so a client
// keeps them too.
func TestEnvelopeUnknownFields(t *testing.T) {
	e := roundTrip[Envelope](t, `{"kind":"chat","x-trace":{"span":"a1"},"z":[1,2],"payload":1}`)
	if len(e.Extra) != 2 || string(e.Extra["x-trace"]) != `{"span":"a1"}` {
		t.Fatalf("extra %v", e.Extra)
	}
	out, _ := json.Marshal(e)
	if string(out) != `{"kind":"chat","payload":1,"x-trace":{"span":"a1"},"z":[1,2]}` {
		t.Fatalf("got %s", out)
	}
}

// Section 2: correlation_id is a string or an array of strings.
func TestCorrelationID(t *testing.T) {
	e := roundTrip[Envelope](t, `{"kind":"k","correlation_id":["a","b"]}`)
	if !e.CorrelationID.Has("b") || e.CorrelationID.Has("c") {
		t.Fatalf("%v", e.CorrelationID)
	}
	roundTrip[Envelope](t, `{"kind":"k","correlation_id":"a"}`)
	// An array of one id means that id, and is written as a string.
	var one Envelope
	if err := json.Unmarshal([]byte(`{"kind":"k","correlation_id":["a"]}`), &one); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(one)
	if string(out) != `{"kind":"k","correlation_id":"a"}` {
		t.Fatalf("got %s", out)
	}
	if err := json.Unmarshal([]byte(`{"kind":"k","correlation_id":7}`), &one); err == nil {
		t.Fatal("a number correlation_id decoded")
	}
}

// Section 3: the path form of a context.
func TestPathContext(t *testing.T) {
	e := roundTrip[Envelope](t, `{"kind":"reflection","context":"task-1/plan/step-2","payload":{}}`)
	c, err := ParseContext(e.Context)
	if err != nil || c.ID != "task-1/plan/step-2" || c.Parent != "task-1/plan" || c.Type != "" {
		t.Fatalf("%+v %v", c, err)
	}
	if string(PathContext("a/b")) != `"a/b"` {
		t.Fatalf("%s", PathContext("a/b"))
	}
	root, _ := ParseContext(PathContext("root"))
	if root.ID != "root" || root.Parent != "" {
		t.Fatalf("%+v", root)
	}
	if string((Context{ID: "r1", Type: "reasoning"}).JSON()) != `{"id":"r1","type":"reasoning"}` {
		t.Fatal((Context{ID: "r1", Type: "reasoning"}).JSON())
	}
	if c, err := ParseContext(nil); err != nil || c.ID != "" {
		t.Fatalf("%+v %v", c, err)
	}
}

// Section 3: a system/context event.
func TestContextEvent(t *testing.T) {
	const literal = `{"protocol": "mcpp/v0.1", "id": "e1", "ts": "2026-11-22T10:00:00.123Z", "from": "system:gateway",
 "kind": "system/context",
 "context": {"id": "reason-789", "type": "reasoning", "parent": "ctx-123"},
 "payload": {"event": "concluded", "reason": "timeout",
             "stats": {"messages": 12, "bytes": 5230, "participants": ["alice"],
                       "depth": 2, "created": "2026-11-22T09:55:00.000Z", "last_activity": "2026-11-22T09:55:00.000Z", "concluded": "2026-11-22T10:00:00.123Z",
                       "tokens": 1730, "tokens_folded": 1730, "tokens_saved": 1730}}}`
	e := roundTrip[Envelope](t, literal)
	if e.From != GatewayID || e.Kind != KindContext || !e.InHistory() || !e.IsSystem() {
		t.Fatalf("%+v", e)
	}
	var ev ContextEvent
	if err := e.DecodePayload(&ev); err != nil {
		t.Fatal(err)
	}
	if ev.Event != ContextConcluded || ev.Reason != ReasonTimeout || ev.Stats.Messages != 12 || ev.Stats.Depth != 2 ||
		!slices.Equal(ev.Stats.Participants, []string{"alice"}) || ev.Stats.Tokens != 1730 || ev.Stats.TokensSaved != 1730 {
		t.Fatalf("%+v", ev)
	}
	roundTrip[ContextEvent](t, string(e.Payload))
}

// Section 5 and limits.Config.Welcome: the welcome.
func TestWelcome(t *testing.T) {
	const literal = `{"you": {"id": "alice", "capabilities": ["*"]},
 "participants": [{"id": "bob", "capabilities": ["mcp/*", "chat"]}],
 "pod": "lab",
 "filter": {"main": true, "contexts": "all", "types": [], "exclude_types": [], "ids": [],
            "subtree": false, "conclusions": false, "routing": "all", "echo": false, "batch": false},
 "limits": {"max_message_bytes": 1048576, "max_context_bytes": 4096, "max_depth": 5, "rate": 100,
            "burst": 200, "context_rate": 50, "context_burst": 100, "context_create_rate": 10,
            "context_create_burst": 20, "context_timeout_ms": 300000, "context_retention_ms": 600000,
            "conclusion_kinds": ["conclusion", "reasoning/conclusion", "reasoning/end"],
            "max_contexts_per_participant": 256, "max_contexts_per_pod": 10000,
            "max_participants_per_pod": 1000, "max_connections": 10000, "max_pods": 1000,
            "send_queue": 1024, "send_queue_bytes": 8388608, "history": 1000,
            "history_age_ms": 86400000, "history_bytes": 268435456, "mcp_session_timeout_ms": 1800000},
 "history": {"replayed": 3, "folded": 12, "collapsed": 1}}`
	w := roundTrip[Welcome](t, literal)
	if w.You.ID != "alice" || len(w.Participants) != 1 || w.Pod != "lab" || *w.Filter.Main != true ||
		w.Filter.Contexts != ContextsAll || w.Limits.Rate != 100 || w.Limits.SendQueueBytes != 8<<20 ||
		w.Limits.History != 1000 || w.Limits.MCPSessionTimeoutMS != 1800000 || w.History.Replayed != 3 || w.History.Resumed != nil ||
		!slices.Equal(w.Limits.ConclusionKinds, DefaultConclusionKinds) {
		t.Fatalf("%+v", w)
	}
	// Without history= or resume=, no history object.
	w2 := roundTrip[Welcome](t, `{"you":{"id":"a","capabilities":[]},"participants":[],"pod":"p","filter":{"main":false},"limits":{"max_message_bytes":1,"max_context_bytes":0,"max_depth":0,"rate":0,"burst":0,"context_rate":0,"context_burst":0,"context_create_rate":0,"context_create_burst":0,"context_timeout_ms":0,"context_retention_ms":0,"conclusion_kinds":null,"max_contexts_per_participant":0,"max_contexts_per_pod":0,"max_participants_per_pod":0,"max_connections":0,"max_pods":0,"send_queue":0,"send_queue_bytes":0,"history":0,"history_age_ms":0,"history_bytes":0,"mcp_session_timeout_ms":0}}`)
	if w2.History != nil {
		t.Fatalf("%+v", w2.History)
	}
}

// Section 8: the welcome's history object.
func TestHistoryInfo(t *testing.T) {
	h := roundTrip[HistoryInfo](t, `{"resumed": true, "replayed": 7}`)
	if h.Resumed == nil || !*h.Resumed || h.Replayed != 7 {
		t.Fatalf("%+v", h)
	}
	h = roundTrip[HistoryInfo](t, `{"resumed": false, "replayed": 0}`)
	if h.Resumed == nil || *h.Resumed {
		t.Fatalf("%+v", h)
	}
	h = roundTrip[HistoryInfo](t, `{"replayed": 3, "folded": 12, "collapsed": 1}`)
	if h.Resumed != nil || *h.Folded != 12 || *h.Collapsed != 1 {
		t.Fatalf("%+v", h)
	}
	h = roundTrip[HistoryInfo](t, `{"replayed": 3, "folded": 0, "collapsed": 0}`)
	if h.Folded == nil || *h.Folded != 0 {
		t.Fatalf("%+v", h)
	}
	roundTrip[HistoryInfo](t, `{"resumed": false, "replayed": 5, "folded": 0, "collapsed": 0}`)
	h = roundTrip[HistoryInfo](t, `{"replayed": 40, "folded": 2, "collapsed": 0, "omitted": 212, "tokens": 7930}`)
	if h.Omitted == nil || *h.Omitted != 212 || h.Tokens == nil || *h.Tokens != 7930 {
		t.Fatalf("%+v", h)
	}
}

// Section 5: presence.
func TestPresence(t *testing.T) {
	p := roundTrip[Presence](t, `{"event": "join", "participant": {"id": "bob", "capabilities": ["chat"]}}`)
	if p.Event != PresenceJoin || p.Participant.ID != "bob" {
		t.Fatalf("%+v", p)
	}
	roundTrip[Presence](t, `{"event": "leave", "participant": {"id": "bob", "capabilities": []}}`)
}

// Section 5: system/error payloads, with the details of
// capability_violation, a retry delay, and details this package does not
// know.
func TestErrorPayload(t *testing.T) {
	p := roundTrip[ErrorPayload](t, `{"error": "capability_violation", "message": "no capability matches", "retryable": false,
 "attempted_kind": "mcp/request:tools/call", "your_capabilities": ["chat"]}`)
	if p.Code != CodeCapabilityViolation || p.AttemptedKind != "mcp/request:tools/call" || fmt.Sprint(p.YourCapabilities) != fmt.Sprint(Kinds("chat")) || p.Details != nil {
		t.Fatalf("%+v", p)
	}
	p = roundTrip[ErrorPayload](t, `{"error": "rate_limited", "message": "over 100/s", "retryable": true, "retry_after_ms": 40}`)
	if !p.Retryable || p.RetryAfterMS != 40 || p.String() != "rate_limited: over 100/s (retry after 40 ms)" {
		t.Fatalf("%+v %s", p, p)
	}
	p = roundTrip[ErrorPayload](t, `{"error": "context_depth_exceeded", "message": "m", "retryable": false, "max_depth": 5, "depth": {"would_be": 6}}`)
	if string(p.Details["max_depth"]) != "5" || string(p.Details["depth"]) != `{"would_be": 6}` {
		t.Fatalf("%+v", p.Details)
	}
	// A participant with no capability at all is told so: [] stays.
	p = roundTrip[ErrorPayload](t, `{"error": "capability_violation", "message": "m", "retryable": false, "attempted_kind": "chat", "your_capabilities": []}`)
	if p.YourCapabilities == nil {
		t.Fatal("[] decoded as nil")
	}
	// A refused upgrade's body.
	r := roundTrip[Refusal](t, `{"error": "unauthorized", "message": "unknown token"}`)
	if r.Code != CodeUnauthorized || r.Code.HTTPStatus() != 401 {
		t.Fatalf("%+v", r)
	}
}

// Section 5: the table's order, and what is retryable.
func TestCodes(t *testing.T) {
	table := []string{"invalid_json", "invalid_envelope", "unsupported_protocol", "auth_violation", "reserved_kind",
		"ambiguous_payload", "capability_violation", "message_too_large", "invalid_recipient", "forbidden",
		"invalid_context", "context_conflict", "context_cycle", "context_depth_exceeded", "duplicate_id",
		"proposal_not_pending", "proposal_changed", "no_pending_request", "context_limit_exceeded", "request_limit_exceeded",
		"proposal_limit_exceeded", "rate_limited", "context_rate_limited", "unknown_request", "invalid_filter",
		"shutting_down", "no_quorum", "unconfirmed"}
	retryable := map[string]bool{"context_limit_exceeded": true, "request_limit_exceeded": true, "proposal_limit_exceeded": true,
		"rate_limited": true, "context_rate_limited": true, "shutting_down": true, "no_quorum": true, "unconfirmed": true}
	if len(EnvelopeCodes) != len(table) {
		t.Fatalf("%d codes, the table has %d", len(EnvelopeCodes), len(table))
	}
	for i, c := range EnvelopeCodes {
		if string(c) != table[i] {
			t.Errorf("code %d is %s, the table says %s", i, c, table[i])
		}
		if c.Retryable() != retryable[string(c)] {
			t.Errorf("%s: Retryable %v", c, c.Retryable())
		}
	}
	status := map[Code]int{CodeInvalidPod: 400, CodeInvalidParticipant: 400, CodeUnauthorized: 401, CodeForbidden: 403,
		CodeOverCapacity: 503, CodeInvalidFilter: 400, CodeUnsupportedProtocol: 400, CodeShuttingDown: 503, CodeNoQuorum: 503}
	if len(UpgradeCodes) != len(status) {
		t.Errorf("%d upgrade codes, want %d", len(UpgradeCodes), len(status))
	}
	for _, c := range UpgradeCodes {
		if c.HTTPStatus() != status[c] {
			t.Errorf("%s: HTTPStatus %d, want %d", c, c.HTTPStatus(), status[c])
		}
	}
	if !CodeOverCapacity.Retryable() || CodeDuplicateID.Retryable() || CodeRateLimited.HTTPStatus() != 0 {
		t.Error("over_capacity, duplicate_id or rate_limited")
	}
	for code, want := range map[CloseCode]string{CloseReplaced: "4000 replaced", CloseSlowConsumer: "4008 slow consumer",
		CloseGoingAway: "1001 going away", CloseMessageTooBig: "1009 message too big", CloseInternalError: "1011 internal error"} {
		if !strings.HasPrefix(code.String(), want) {
			t.Errorf("%d: %q", int(code), code.String())
		}
	}
}

// Section 4: the effective filter, a gateway/filter patch, and the query
// parameters.
func TestFilter(t *testing.T) {
	f := roundTrip[Filter](t, `{"main": true, "contexts": "all", "types": [], "exclude_types": [], "ids": [],
 "subtree": false, "conclusions": false, "routing": "all", "echo": false, "batch": false}`)
	if f.Main == nil || !*f.Main || f.Types == nil || f.Echo == nil {
		t.Fatalf("%+v", f)
	}
	patch := roundTrip[Filter](t, `{"contexts": "none", "types": ["reasoning"]}`)
	if patch.Main != nil || patch.Contexts != ContextsNone {
		t.Fatalf("%+v", patch)
	}
	// Clearing a list is [] in a patch.
	roundTrip[Filter](t, `{"ids": []}`)

	q := Filter{Main: Bool(false), Contexts: ContextsNone, IDs: []string{"reason-789", "t1"}, Subtree: Bool(true), Batch: Bool(true), Types: []string{}}.Query()
	if got, want := q.Encode(), "batch=1&contexts=none&ids=reason-789%2Ct1&main=0&subtree=1"; got != want {
		t.Fatalf("query %s, want %s", got, want)
	}
	if len(f.Query()) != 7 { // every field but the three empty lists
		t.Fatalf("%v", f.Query())
	}
}

// Section 6: gateway/contexts and its answer.
func TestContexts(t *testing.T) {
	r := roundTrip[ContextsRequest](t, `{"state": "all", "type": "reasoning", "limit": 10}`)
	if r.State != StateAll || r.Limit != 10 {
		t.Fatalf("%+v", r)
	}
	a := roundTrip[ContextsAnswer](t, `{"contexts": [{"id": "reason-789", "type": "reasoning",
   "parent": "ctx-123", "depth": 2, "state": "active", "reason": null, "creator": "alice", "messages": 3, "bytes": 812,
   "participants": ["alice"], "created": "2026-11-22T10:00:00.000Z", "last_activity": "2026-11-22T10:00:01.000Z", "concluded": null,
   "tokens": 270, "tokens_folded": null, "tokens_saved": null},
  {"id": "root", "type": null, "parent": null, "depth": 1, "state": "concluded", "reason": "conclusion", "creator": "bob",
   "messages": 1, "bytes": 50, "participants": ["bob"], "created": "2026-11-22T10:00:00.000Z",
   "last_activity": "2026-11-22T10:00:00.000Z", "concluded": "2026-11-22T10:00:00.000Z",
   "tokens": 21, "tokens_folded": 0, "tokens_saved": -21}]}`)
	if len(a.Contexts) != 2 || *a.Contexts[0].Type != "reasoning" || a.Contexts[0].Reason != nil ||
		a.Contexts[1].Type != nil || *a.Contexts[1].Reason != ReasonConclusion || a.Contexts[1].State != StateConcluded ||
		a.Contexts[0].Tokens != 270 || a.Contexts[0].TokensFolded != nil || *a.Contexts[1].TokensSaved != -21 {
		t.Fatalf("%+v", a)
	}
	roundTrip[ContextsRequest](t, `{}`)
}

// Section 6: gateway/history and its answer, with a collapsed envelope
// (section 8).
func TestHistory(t *testing.T) {
	r := roundTrip[HistoryRequest](t, `{"before": "env-90", "context": "task-1", "limit": 50, "fold": false}`)
	if r.Fold == nil || *r.Fold || r.Before != "env-90" {
		t.Fatalf("%+v", r)
	}
	roundTrip[HistoryRequest](t, `{"after": "env-1"}`)
	if r := roundTrip[HistoryRequest](t, `{"before": "env-90", "max_tokens": 8000}`); r.MaxTokens != 8000 {
		t.Fatalf("%+v", r)
	}
	a := roundTrip[HistoryAnswer](t, `{"envelopes": [
  {"protocol": "mcpp/v0.1", "id": "env-41", "ts": "2026-11-22T10:00:00.000Z", "from": "bot", "kind": "activity",
   "lifecycle": {"mode": "transient", "summary": "15 activity records (page 1/9, IDs: 72, 73, 74…)"},
   "payload": {"collapsed": true, "summary": "15 activity records (page 1/9, IDs: 72, 73, 74…)", "consumed_by": "env-50"}},
  {"protocol": "mcpp/v0.1", "id": "env-50", "ts": "2026-11-22T10:00:01.000Z", "from": "bot", "kind": "digest",
   "lifecycle": {"consumes": ["env-41", "env-44"]}, "payload": {}}], "more": true, "tokens": 143}`)
	if len(a.Envelopes) != 2 || !a.More {
		t.Fatalf("%+v", a)
	}
	c, ok := IsCollapsed(a.Envelopes[0].Payload)
	if !ok || c.ConsumedBy != "env-50" || a.Envelopes[0].Lifecycle.Mode != ModeTransient {
		t.Fatalf("%+v %v", c, ok)
	}
	if _, ok := IsCollapsed(a.Envelopes[1].Payload); ok {
		t.Fatal("an ordinary payload reads as collapsed")
	}
	roundTrip[Collapsed](t, `{"collapsed": true, "summary": "s", "consumed_by": "env-50"}`)
	roundTrip[HistoryAnswer](t, `{"envelopes": [], "more": false, "tokens": 0}`)

	// Held raw, each envelope keeps its bytes: its field order and its
	// fields of any kind, as the gateway wrote them.
	const env = `{"id":"e1","kind":"k","x-extra":[1],"protocol":"mcpp/v0.1","payload":{"b":1,"a":2}}`
	raw := roundTrip[HistoryAnswerOf[json.RawMessage]](t, `{"envelopes": [`+env+`], "more": false, "tokens": 30}`)
	if len(raw.Envelopes) != 1 || string(raw.Envelopes[0]) != env {
		t.Fatalf("%s", raw.Envelopes)
	}
	out, _ := json.Marshal(raw)
	if string(out) != `{"envelopes":[`+env+`],"more":false,"tokens":30}` {
		t.Fatalf("got %s", out)
	}
}

// Section 8: the lifecycle objects, and what history keeps.
func TestLifecycle(t *testing.T) {
	for _, literal := range []string{
		`{"mode": "transient", "summary": "15 activity records (page 1/9, IDs: 72, 73, 74…)"}`,
		`{"mode": "ephemeral"}`,
		`{"consumes": ["env-41", "env-44"]}`,
		`{"mode": "durable"}`,
	} {
		roundTrip[Lifecycle](t, literal)
	}
	kept := map[string]bool{
		`{"kind":"chat"}`: true,
		`{"kind":"chat","lifecycle":{"mode":"transient","summary":"s"}}`: true,
		`{"kind":"chat","lifecycle":{"mode":"ephemeral"}}`:               false,
		`{"kind":"system/context"}`:                                      true,
		`{"kind":"system/welcome"}`:                                      false,
		`{"kind":"system/presence"}`:                                     false,
		`{"kind":"system/error"}`:                                        false,
		`{"kind":"system/filter"}`:                                       false,
		`{"kind":"gateway/filter"}`:                                      false,
	}
	for literal, want := range kept {
		var e Envelope
		if err := json.Unmarshal([]byte(literal), &e); err != nil {
			t.Fatal(err)
		}
		if e.InHistory() != want {
			t.Errorf("%s: InHistory %v", literal, e.InHistory())
		}
	}
}

// Section 6: the answer of POST /pods/NAME/envelopes.
func TestPublishAnswer(t *testing.T) {
	a := roundTrip[PublishAnswer](t, `{"results": [
  {"id": "env-1"},
  {"id": "q1", "answer": {"contexts": []}},
  {"error": "reserved_kind", "message": "system/* kinds are the gateway's", "retryable": false, "id": "env-3"},
  {"error": "invalid_json", "message": "line 4 is not a JSON object", "retryable": false},
  {"error": "capability_violation", "message": "m", "retryable": false, "attempted_kind": "x", "your_capabilities": ["chat"], "id": "env-5"}]}`)
	r := a.Results
	if len(r) != 5 || r[0].ID != "env-1" || r[0].Error != nil || string(r[1].Answer) != `{"contexts": []}` ||
		r[2].Error == nil || r[2].Error.Code != CodeReservedKind || r[2].ID != "env-3" || r[2].Error.Details != nil ||
		r[3].ID != "" || r[3].Error.Code != CodeInvalidJSON || r[4].Error.AttemptedKind != "x" {
		t.Fatalf("%+v", a)
	}
	if PublishPath("lab") != "/pods/lab/envelopes" {
		t.Fatal(PublishPath("lab"))
	}
}

// Section 9: the payloads of context/branch and conclusion.
func TestBranchConclusion(t *testing.T) {
	roundTrip[Branch](t, `{"description": "compare the two plans"}`)
	roundTrip[Conclusion](t, `{"summary": "plan B is cheaper"}`)
}

func TestEnvelopeErrors(t *testing.T) {
	var e Envelope
	for _, bad := range []string{`null`, `[]`, `{"kind":7}`, `{"to":"bob"}`, `{"lifecycle":"x"}`} {
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
	if _, err := json.Marshal(Envelope{Kind: "k", Payload: json.RawMessage(`{`)}); err == nil {
		t.Error("a payload that is not JSON encoded")
	}
	if err := (&Envelope{Kind: "k"}).DecodePayload(&struct{}{}); err == nil {
		t.Error("no payload decoded")
	}
}

// TestSchemes: one address names a gateway's WebSocket upgrade and its
// HTTP requests alike.
func TestSchemes(t *testing.T) {
	for in, want := range map[string][2]string{
		"ws://h/ws": {"ws", "http"}, "http://h": {"ws", "http"}, "wss://h": {"wss", "https"}, "https://h/x": {"wss", "https"},
	} {
		for i, f := range []func(*url.URL) error{AsWebSocket, AsHTTP} {
			u, _ := url.Parse(in)
			if err := f(u); err != nil || u.Scheme != want[i] {
				t.Errorf("%s: %v %s, want %s", in, err, u.Scheme, want[i])
			}
		}
	}
	for _, in := range []string{"ftp://h", "h:8080", "nats://h"} {
		u, _ := url.Parse(in)
		if AsWebSocket(u) == nil || AsHTTP(u) == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}
