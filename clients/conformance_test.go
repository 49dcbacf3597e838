package clients_test

// The conformance test: the same scenarios, step by step, through the
// TypeScript client's driver and the Python client's
// (clients/*/conformance/, the line protocol of the drivers' comments),
// against real gateways. Each step's answer must hold what the scenario
// expects, in both languages, and the two languages' answers must be the
// same once what legitimately differs is set aside: the ids the clients
// or the gateway make up (UUIDs, numbered in order of appearance), times,
// the pod's name (each language has a pod of its own), a rate limit's
// retry_after_ms, the token estimates of contexts, and the drivers' error
// messages (each language words its own; the gateway's messages inside
// envelopes are compared).
//
// The drivers' protocol: a JSON request a line on stdin, exactly one JSON
// answer a line on stdout for each, in order. A driver holds at most one
// client at a time; connect closes the one it had.
//
//	{"op":"connect","url":U,"options":{"pod","participant","token","filter","history","fold","resume"}}
//	                                      → {"ok":true,"welcome":WELCOME_PAYLOAD}
//	{"op":"send","envelope":E,"confirm"?:false}  → {"ok":true,"id":ID} (confirm is passed only when given)
//	{"op":"request","kind":"gateway/…","payload":P} → {"ok":true,"answer":ANSWER_ENVELOPE}
//	{"op":"next","timeout_ms":N}          → {"ok":true,"envelope":E} or {"ok":true,"event":{"type":"reconnected","resumed":B}}
//	{"op":"branch","type":T,"parent"?:ID,"payload"?:P} → {"ok":true,"context":{"id","type","parent"?}}
//	{"op":"conclude","context":ID,"payload":P} → {"ok":true,"id":ID}
//	{"op":"publish","url":U,"pod":…,"participant"?:…,"token"?:…,"envelopes":[…]} → {"ok":true,"results":[…]}
//	{"op":"close"}                        → {"ok":true}
//
// A failure is {"ok":false,"error":{"type":T,"code"?,"status"?,"close_code"?,"message"?}}, T one of
// "refused" (an HTTP refusal: status and code), "gateway" (a system/error: code), "closed" (the
// client ended: close_code when the gateway sent one), "timeout" (next found nothing) and "usage"
// (a request the driver cannot carry out).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// languages are the drivers, run from clients/.
var languages = []struct {
	name    string
	command []string
}{
	{"typescript", []string{"node", "typescript/conformance/driver.mjs"}},
	{"python", []string{"/usr/bin/python3", "python/conformance/driver.py"}},
}

// step is one request to one participant's driver.
type step struct {
	// as names the driver (each participant of a scenario has its own:
	// a driver holds one client at a time).
	as string
	// req is the request, JSON. Placeholders: {ws}, {http} (the open
	// gateway), {tokens} (the gateway with a token file), {tight} (the
	// gateway with a burst of 3), {pod} (the language's pod), and the
	// names saved by earlier steps.
	req string
	// want is JSON the answer must contain: every key of an object (a
	// key whose value is "<absent>" must be absent), every element of an
	// array (of the same length), every other value equal. "<uuid>"
	// matches any UUID, "<string>" any non-empty string. Placeholders as
	// in req.
	want string
	// save keeps values of the answer, by dotted path
	// ("context.id"), for the placeholders of later steps.
	save map[string]string
}

type scenario struct {
	name  string
	steps []step
}

// The tokens of the gateway started with a token file.
const conformanceTokens = `{"tokens": [
  {"token": "alice-token", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "bot-token", "participant": "bot", "capabilities": ["*"], "pods": ["lab-*"]}
]}`

var scenarios = []scenario{
	{"connect and the welcome", []step{
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice"}}`,
			want: `{"ok":true,"welcome":{"you":{"id":"alice","capabilities":["*"]},"pod":"{pod}","participants":[],
				"filter":{"contexts":"all","routing":"all"},"limits":{"history":1000},"history":"<absent>"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"system/welcome","from":"system:gateway","to":["alice"],"id":"<uuid>","ts":"<string>",
				"payload":{"you":{"id":"alice"},"pod":"{pod}"}}}`},
		{as: "bob", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"bob","filter":{"types":["chat","note"],"echo":true}}}`,
			want: `{"ok":true,"welcome":{"you":{"id":"bob"},"participants":[{"id":"alice","capabilities":["*"]}],
				"filter":{"types":["chat","note"],"echo":true}}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"system/presence","payload":{"event":"join","participant":{"id":"bob","capabilities":["*"]}}}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
	{"send with and without an id, and receive in another client", []step{
		{as: "bob", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"bob"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"c-1","kind":"chat","to":["bob"],"payload":{"text":"hello"},"x-extra":[1]}}`,
			want: `{"ok":true,"id":"c-1"}`},
		{as: "alice", req: `{"op":"send","envelope":{"kind":"note","context":{"id":"task-1","type":"task"},"payload":[1,2]}}`,
			want: `{"ok":true,"id":"<uuid>"}`, save: map[string]string{"note": "id"}},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/presence","payload":{"event":"join"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"protocol":"mcpp/v0.1","id":"c-1","ts":"<string>","from":"alice","to":["bob"],"kind":"chat",
				"payload":{"text":"hello"},"x-extra":[1]}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"id":"{note}","from":"alice","kind":"note","context":{"id":"task-1","type":"task"},"payload":[1,2]}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
	{"requests: gateway/contexts, gateway/history, and refused ones", []step{
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"h-1","kind":"chat","payload":1}}`, want: `{"ok":true,"id":"h-1"}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"h-2","kind":"step","context":{"id":"r-1","type":"reasoning"},"payload":2}}`,
			want: `{"ok":true,"id":"h-2"}`},
		{as: "alice", req: `{"op":"request","kind":"gateway/contexts","payload":{"state":"all"}}`,
			want: `{"ok":true,"answer":{"kind":"system/contexts","from":"system:gateway","to":["alice"],"correlation_id":"<uuid>",
				"payload":{"contexts":[{"id":"r-1","type":"reasoning","state":"active","creator":"alice"}]}}}`},
		{as: "alice", req: `{"op":"request","kind":"gateway/history","payload":{"limit":10}}`,
			want: `{"ok":true,"answer":{"kind":"system/history","payload":{"envelopes":[{"id":"h-1","payload":1},{"id":"h-2","payload":2}]}}}`},
		{as: "alice", req: `{"op":"request","kind":"gateway/history","payload":{"limit":0}}`,
			want: `{"ok":false,"error":{"type":"gateway","code":"invalid_envelope"}}`},
		{as: "alice", req: `{"op":"request","kind":"gateway/nope","payload":{}}`,
			want: `{"ok":false,"error":{"type":"gateway","code":"unknown_request"}}`},
		// The answers went to the requests, not to the stream.
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
	{"a refused send: the gateway's code, or the refusal in the stream when not confirmed", []step{
		{as: "alice", req: `{"op":"connect","url":"{tokens}","options":{"pod":"{pod}","token":"alice-token"}}`,
			want: `{"ok":true,"welcome":{"you":{"id":"alice","capabilities":["chat"]}}}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"t-1","kind":"tool/call","payload":{}}}`,
			want: `{"ok":false,"error":{"type":"gateway","code":"capability_violation","message":"<string>"}}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"t-2","kind":"chat"}}`, want: `{"ok":true,"id":"t-2"}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"t-3","kind":"tool/call"},"confirm":false}`, want: `{"ok":true,"id":"t-3"}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"system/error","from":"system:gateway","correlation_id":"t-3",
				"payload":{"error":"capability_violation","retryable":false,"attempted_kind":"tool/call","your_capabilities":["chat"]}}}`},
		// t-1's refusal went to its send.
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
	{"refused upgrades: the HTTP status and code", []step{
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"bad pod","participant":"alice"}}`,
			want: `{"ok":false,"error":{"type":"refused","status":400,"code":"invalid_pod"}}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"has space"}}`,
			want: `{"ok":false,"error":{"type":"refused","status":400,"code":"invalid_participant"}}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","filter":{"routing":"sideways"}}}`,
			want: `{"ok":false,"error":{"type":"refused","status":400,"code":"invalid_filter"}}`},
		{as: "alice", req: `{"op":"connect","url":"{tokens}","options":{"pod":"{pod}","token":"wrong"}}`,
			want: `{"ok":false,"error":{"type":"refused","status":401,"code":"unauthorized"}}`},
		{as: "alice", req: `{"op":"connect","url":"{tokens}","options":{"pod":"{pod}"}}`,
			want: `{"ok":false,"error":{"type":"refused","status":401,"code":"unauthorized"}}`},
		{as: "alice", req: `{"op":"connect","url":"{tokens}","options":{"pod":"elsewhere-{pod}","token":"bot-token"}}`,
			want: `{"ok":false,"error":{"type":"refused","status":403,"code":"forbidden"}}`},
		// No client after a refusal.
		{as: "alice", req: `{"op":"send","envelope":{"kind":"chat"}}`, want: `{"ok":false,"error":{"type":"usage"}}`},
	}},
	{"resume: after a known id, and after an unknown one", []step{
		{as: "ci", req: `{"op":"publish","url":"{http}","pod":"{pod}","participant":"ci",
				"envelopes":[{"id":"p-1","kind":"note"},{"id":"p-2","kind":"note"},{"id":"p-3","kind":"note"}]}`,
			want: `{"ok":true,"results":[{"id":"p-1"},{"id":"p-2"},{"id":"p-3"}]}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice","resume":"p-1"}}`,
			want: `{"ok":true,"welcome":{"history":{"resumed":true,"replayed":2}}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"p-2","from":"ci"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"p-3"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice","resume":"no-such-id"}}`,
			want: `{"ok":true,"welcome":{"history":{"resumed":false,"replayed":0}}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice","resume":"no-such-id","history":2}}`,
			want: `{"ok":true,"welcome":{"history":{"resumed":false,"replayed":2}}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"p-2"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"p-3"}}`},
	}},
	{"branch and conclude: the system/context event", []step{
		{as: "bob", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"bob"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"alice"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"branch","type":"reasoning","payload":{"description":"compare the plans"}}`,
			want: `{"ok":true,"context":{"id":"<uuid>","type":"reasoning","parent":"<absent>"}}`, save: map[string]string{"ctx": "context.id"}},
		{as: "alice", req: `{"op":"branch","type":"plan","parent":"{ctx}"}`,
			want: `{"ok":true,"context":{"id":"<uuid>","type":"plan","parent":"{ctx}"}}`, save: map[string]string{"sub": "context.id"}},
		{as: "alice", req: `{"op":"send","envelope":{"kind":"reasoning/step","context":{"id":"{ctx}"},"payload":{"text":"B is cheaper"}}}`,
			want: `{"ok":true}`},
		{as: "alice", req: `{"op":"conclude","context":"{sub}","payload":{"summary":"nothing to plan"}}`, want: `{"ok":true,"id":"<uuid>"}`},
		{as: "alice", req: `{"op":"conclude","context":"{ctx}","payload":{"summary":"plan B"}}`,
			want: `{"ok":true,"id":"<uuid>"}`, save: map[string]string{"conclusion": "id"}},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/presence"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"context/branch","from":"alice","context":{"id":"{ctx}","type":"reasoning"},
				"payload":{"description":"compare the plans"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"context/branch","context":{"id":"{sub}","type":"plan","parent":"{ctx}"},"payload":{}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"reasoning/step","context":{"id":"{ctx}"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"conclusion","context":{"id":"{sub}"},"payload":{"summary":"nothing to plan"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"system/context","context":{"id":"{sub}","type":"plan","parent":"{ctx}"},
				"payload":{"event":"concluded","reason":"conclusion"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"id":"{conclusion}","kind":"conclusion","from":"alice","context":{"id":"{ctx}"},"payload":{"summary":"plan B"}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`,
			want: `{"ok":true,"envelope":{"kind":"system/context","from":"system:gateway","context":{"id":"{ctx}","type":"reasoning"},
				"payload":{"event":"concluded","reason":"conclusion","stats":{"participants":["alice"],"depth":1}}}}`},
		{as: "alice", req: `{"op":"request","kind":"gateway/contexts","payload":{"id":"{ctx}","state":"all"}}`,
			want: `{"ok":true,"answer":{"payload":{"contexts":[{"id":"{ctx}","state":"concluded","creator":"alice"}]}}}`},
	}},
	{"publish over HTTP", []step{
		{as: "bob", req: `{"op":"connect","url":"{ws}","options":{"pod":"{pod}","participant":"bob"}}`, want: `{"ok":true}`},
		{as: "ci", req: `{"op":"publish","url":"{http}","pod":"{pod}","participant":"ci",
				"envelopes":[{"id":"n-1","kind":"note","payload":{"x":1}},{"kind":"system/x"},{"kind":"gateway/history","payload":{"limit":1}}]}`,
			want: `{"ok":true,"results":[{"id":"n-1"},{"id":"<uuid>","error":"reserved_kind"},
				{"id":"<uuid>","answer":{"envelopes":[{"id":"n-1","from":"ci"}]}}]}`},
		// The WebSocket URL works too; in open mode the participant is required.
		{as: "ci", req: `{"op":"publish","url":"{ws}","pod":"{pod}","envelopes":[{"kind":"note"}]}`,
			want: `{"ok":false,"error":{"type":"refused","status":400,"code":"invalid_participant"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		// No join nor leave of ci: only what it published.
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"n-1","from":"ci","kind":"note","payload":{"x":1}}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
	{"the confirming fence takes a rate token, and a refused fence still confirms", []step{
		{as: "bob", req: `{"op":"connect","url":"{tight}","options":{"pod":"{pod}","participant":"bob"}}`, want: `{"ok":true}`},
		{as: "alice", req: `{"op":"connect","url":"{tight}","options":{"pod":"{pod}","participant":"alice"}}`,
			want: `{"ok":true,"welcome":{"limits":{"burst":3}}}`},
		// a and its fence: tokens 1 and 2 of 3.
		{as: "alice", req: `{"op":"send","envelope":{"id":"a","kind":"chat"}}`, want: `{"ok":true,"id":"a"}`},
		// b takes token 3; the gateway refuses its fence (rate_limited),
		// an answer that still comes after its judgement of b.
		{as: "alice", req: `{"op":"send","envelope":{"id":"b","kind":"chat"}}`, want: `{"ok":true,"id":"b"}`},
		{as: "alice", req: `{"op":"send","envelope":{"id":"c","kind":"chat"}}`,
			want: `{"ok":false,"error":{"type":"gateway","code":"rate_limited"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/presence"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"a"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"id":"b"}}`},
		{as: "bob", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
		// The refusals went to the sends (the fence's to nobody).
		{as: "alice", req: `{"op":"next","timeout_ms":5000}`, want: `{"ok":true,"envelope":{"kind":"system/welcome"}}`},
		{as: "alice", req: `{"op":"next","timeout_ms":300}`, want: `{"ok":false,"error":{"type":"timeout"}}`},
	}},
}

// TestConformance runs every scenario through both clients' drivers and
// compares what they answer.
func TestConformance(t *testing.T) {
	buildTypeScript(t)
	installPython(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(conformanceTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	open := startGateway(t, "--rate", "10000", "--burst", "10000")
	withTokens := startGateway(t, "--tokens", tokens)
	// A burst of 3, refilled at one token every 1,000 s.
	tight := startGateway(t, "--rate", "0.001", "--burst", "3")
	places := map[string]string{
		"{ws}": "ws://" + open, "{http}": "http://" + open, "{tokens}": "ws://" + withTokens, "{tight}": "ws://" + tight,
	}

	for n, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel() // each scenario in pods of its own
			transcripts := make([][]answer, len(languages))
			errs := make([]error, len(languages))
			var wg sync.WaitGroup
			for i, lang := range languages {
				vars := map[string]string{"{pod}": fmt.Sprintf("conformance-%d-%s-%d", n, lang.name, time.Now().UnixNano())}
				for k, v := range places {
					vars[k] = v
				}
				wg.Go(func() { transcripts[i], errs[i] = play(lang.command, sc.steps, vars) })
			}
			wg.Wait()
			for i, lang := range languages {
				if errs[i] != nil {
					t.Errorf("%s: %v", lang.name, errs[i])
				}
				for _, a := range transcripts[i] {
					for _, miss := range a.misses {
						t.Errorf("%s, step %d (%s: %s): %s\n  the answer: %s", lang.name, a.step+1, sc.steps[a.step].as, a.req, miss, clip(a.raw))
					}
				}
			}
			if t.Failed() {
				return
			}
			ts, py := transcripts[0], transcripts[1]
			for i := range ts {
				if d := differences("", ts[i].normal, py[i].normal); len(d) > 0 {
					t.Errorf("step %d (%s: %s): the clients disagree (typescript | python), after normalizing ids, times and the pod:\n  %s\n  typescript: %s\n  python:     %s",
						i+1, sc.steps[i].as, ts[i].req, strings.Join(d, "\n  "), clip(ts[i].raw), clip(py[i].raw))
				}
			}
		})
	}
}

// answer is one step's answer, as the driver wrote it and normalized.
type answer struct {
	step   int
	req    string // the request sent, placeholders filled in
	raw    string
	normal any
	misses []string // how it falls short of the step's want
}

// play runs the steps through one language's drivers (one per
// participant) and returns their answers.
func play(command []string, steps []step, vars map[string]string) ([]answer, error) {
	drivers := map[string]*driver{}
	defer func() {
		for _, d := range drivers {
			d.stop()
		}
	}()
	ids := newNumbering(vars["{pod}"])
	var out []answer
	for i, s := range steps {
		d := drivers[s.as]
		if d == nil {
			var err error
			if d, err = startDriver(command); err != nil {
				return out, err
			}
			drivers[s.as] = d
		}
		req := fill(s.req, vars)
		raw, err := d.ask(req)
		if err != nil {
			return out, fmt.Errorf("step %d (%s: %s): %w", i+1, s.as, req, err)
		}
		var got any
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			return out, fmt.Errorf("step %d (%s: %s): the answer is not JSON: %q", i+1, s.as, req, raw)
		}
		a := answer{step: i, req: req, raw: raw, normal: ids.normalize(got, "")}
		if s.want != "" {
			var want any
			if err := json.Unmarshal([]byte(fill(s.want, vars)), &want); err != nil {
				return out, fmt.Errorf("step %d: the scenario's want is not JSON: %w", i+1, err)
			}
			a.misses = contains("", want, got)
		}
		for name, path := range s.save {
			v, ok := lookup(got, path).(string)
			if !ok {
				a.misses = append(a.misses, fmt.Sprintf("no string at %s to keep as {%s}", path, name))
				continue
			}
			vars["{"+name+"}"] = v
		}
		out = append(out, a)
	}
	return out, nil
}

func fill(s string, vars map[string]string) string {
	for k, v := range vars {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

func lookup(v any, path string) any {
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[key]
	}
	return v
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// contains says where got falls short of want (see step.want).
func contains(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %s", orTop(path), show(got))}
		}
		var miss []string
		for _, k := range sortedKeys(w) {
			if w[k] == "<absent>" {
				if v, there := g[k]; there {
					miss = append(miss, fmt.Sprintf("%s.%s: want it absent, got %s", path, k, show(v)))
				}
				continue
			}
			v, there := g[k]
			if !there {
				miss = append(miss, fmt.Sprintf("%s.%s: missing, want %s", path, k, show(w[k])))
				continue
			}
			miss = append(miss, contains(path+"."+k, w[k], v)...)
		}
		return miss
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %s, got %s", orTop(path), show(want), show(got))}
		}
		var miss []string
		for i := range w {
			miss = append(miss, contains(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return miss
	case string:
		s, isString := got.(string)
		switch {
		case w == "<uuid>" && isString && uuidPattern.MatchString(s),
			w == "<string>" && isString && s != "",
			w == s && isString:
			return nil
		}
	default:
		if reflect.DeepEqual(want, got) {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: want %s, got %s", orTop(path), show(want), show(got))}
}

// numbering normalizes one transcript: what legitimately differs between
// two runs of a scenario is replaced by what it stands for.
type numbering struct {
	pod string
	ids map[string]string
}

func newNumbering(pod string) *numbering { return &numbering{pod: pod, ids: map[string]string{}} }

var timePattern = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)

func (n *numbering) normalize(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range sortedKeys(v) {
			switch {
			case k == "retry_after_ms":
				out[k] = "<ms>" // how long until the next token: a matter of timing
			case (k == "tokens" || k == "tokens_folded" || k == "tokens_saved") && isNumber(v[k]):
				// An estimate that weighs the characters, and the ids
				// are random: it varies by a few from run to run. The
				// sizes of what the clients sent are compared in "bytes".
				out[k] = "<tokens>"
			case k == "message" && key == "error":
				out[k] = "<message>" // the driver's error text: each language words its own
			default:
				out[k] = n.normalize(v[k], k)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = n.normalize(v[i], key)
		}
		return out
	case string:
		switch {
		case n.pod != "" && strings.Contains(v, n.pod):
			return strings.ReplaceAll(v, n.pod, "<pod>")
		case uuidPattern.MatchString(v):
			if _, ok := n.ids[v]; !ok {
				n.ids[v] = fmt.Sprintf("<id %d>", len(n.ids)+1)
			}
			return n.ids[v]
		case timePattern.MatchString(v):
			return "<time>"
		}
	}
	return v
}

func isNumber(v any) bool {
	_, ok := v.(float64)
	return ok
}

// differences lists where a and b differ, by path.
func differences(path string, a, b any) []string {
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		var out []string
		keys := sortedKeys(am)
		for _, k := range sortedKeys(bm) {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			av, inA := am[k]
			bv, inB := bm[k]
			switch {
			case !inA:
				out = append(out, fmt.Sprintf("%s.%s: absent | %s", path, k, show(bv)))
			case !inB:
				out = append(out, fmt.Sprintf("%s.%s: %s | absent", path, k, show(av)))
			default:
				out = append(out, differences(path+"."+k, av, bv)...)
			}
		}
		return out
	}
	as, aIsSlice := a.([]any)
	bs, bIsSlice := b.([]any)
	if aIsSlice && bIsSlice && len(as) == len(bs) {
		var out []string
		for i := range as {
			out = append(out, differences(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %s | %s", orTop(path), show(a), show(b))}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func show(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<uuid>", not "\u003cuuid\u003e"
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSuffix(b.String(), "\n")
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// clip shortens an answer shown in a failure: the differences say what
// matters; a welcome's limits would drown them.
func clip(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}

func orTop(path string) string {
	if path == "" {
		return "the answer"
	}
	return path
}

// driver is one conformance driver process: a request a line on its
// stdin, an answer a line on its stdout.
type driver struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers chan string
	stderr  *syncBuffer
}

// answerWait bounds each answer: the longest op of the scenarios waits
// 5 s for the stream.
const answerWait = 20 * time.Second

func startDriver(command []string) (*driver, error) {
	cmd := exec.Command(command[0], command[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	d := &driver{cmd: cmd, stdin: stdin, answers: make(chan string), stderr: &syncBuffer{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %v: %w", command, err)
	}
	go func() {
		defer close(d.answers)
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 16<<20)
		for lines.Scan() {
			d.answers <- lines.Text()
		}
	}()
	return d, nil
}

func (d *driver) ask(req string) (string, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(req)); err != nil {
		return "", fmt.Errorf("the scenario's request is not JSON: %w", err)
	}
	compact.WriteByte('\n')
	if _, err := d.stdin.Write(compact.Bytes()); err != nil {
		return "", fmt.Errorf("writing to the driver: %w; its stderr:\n%s", err, d.stderr)
	}
	select {
	case line, ok := <-d.answers:
		if !ok {
			return "", fmt.Errorf("the driver ended without an answer; its stderr:\n%s", d.stderr)
		}
		return line, nil
	case <-time.After(answerWait):
		return "", fmt.Errorf("no answer within %v; the driver's stderr:\n%s", answerWait, d.stderr)
	}
}

// stop closes the driver's stdin (it closes its client and exits), and
// kills it if it has not exited in a few seconds.
func (d *driver) stop() {
	d.stdin.Close()
	exited := make(chan struct{})
	go func() {
		for range d.answers {
		}
		d.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-exited
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`msg="mcpp-gateway listening" addr=(127\.0\.0\.1:\d+)`)

// startGateway starts the gateway TestMain built on a free loopback port,
// with args, and returns its address; it is stopped when the test ends.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(gatewayBin, slices.Concat([]string{"--listen", "127.0.0.1:0"}, args)...)
	log := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the gateway: %v", err)
	}
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(pr)
		for lines.Scan() {
			fmt.Fprintln(log, lines.Text())
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("gateway %v:\n%s", args, log)
		}
	})
	select {
	case a := <-addr:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway %v did not say where it listens within 30 s:\n%s", args, log)
		return ""
	}
}
