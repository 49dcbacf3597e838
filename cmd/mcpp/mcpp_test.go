package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func testEnv(stdin string) (*env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &env{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(string) string { return "" },
	}, &out, &errb
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"tail"},                                // no --pod
		{"tail", "--pod", "lab", "--main", "0"}, // a yes/no flag's value must follow =
		{"tail", "--pod", "lab", "--count", "-1"}, // negative count
		{"tail", "--pod", "lab", "--unknown"},     // unknown flag
		{"send", "--pod", "lab"},                  // no --kind
		{"send", "--pod", "lab", "--kind", "chat", "--payload", "hello"},
		{"send", "--pod", "lab", "--kind", "chat", "--context", "{broken"},
		{"send", "--pod", "lab", "--stdin", "--id", "x"},
		{"send", "--pod", "lab", "--kind", "chat", "--gateway", "ftp://h"},
		{"contexts", "--pod", "lab", "--state", "sleeping"},
	} {
		e, _, errb := testEnv("")
		if code := run(context.Background(), e, args); code != exitUsage {
			t.Errorf("mcpp %v: exit %d, want %d (stderr %q)", args, code, exitUsage, errb)
		}
		if errb.Len() == 0 {
			t.Errorf("mcpp %v: nothing on stderr", args)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"tail", "-h"}, {"send", "--help"}, {"help", "contexts"}} {
		e, out, _ := testEnv("")
		if code := run(context.Background(), e, args); code != exitOK {
			t.Errorf("mcpp %v: exit %d, want 0", args, code)
		}
		if !strings.Contains(out.String(), "Usage: mcpp") {
			t.Errorf("mcpp %v: no usage on stdout: %q", args, out)
		}
	}
}

func TestGatewayURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:8080":          "ws://127.0.0.1:8080/ws",
		"ws://127.0.0.1:8080/":         "ws://127.0.0.1:8080/ws",
		"ws://127.0.0.1:8080/ws":       "ws://127.0.0.1:8080/ws",
		"ws://127.0.0.1:8080/ws/":      "ws://127.0.0.1:8080/ws",
		"http://h:1":                   "ws://h:1/ws",
		"https://h/mcpp":               "wss://h/mcpp/ws",
		"127.0.0.1:9000":               "ws://127.0.0.1:9000/ws",
		"wss://h/ws?token=t":           "wss://h/ws?token=t",
		"ws://127.0.0.1:8080/x/ws?a=b": "ws://127.0.0.1:8080/x/ws?a=b",
	} {
		u, err := gatewayURL(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if u.String() != want {
			t.Errorf("%s: got %s, want %s", in, u, want)
		}
	}
	c := connFlags{gateway: "ws://h:1/ws?token=t", pod: "lab", participant: "al"}
	u, err := c.url(map[string][]string{"contexts": {"none"}})
	if err != nil || u != "ws://h:1/ws?contexts=none&participant=al&pod=lab&token=t" {
		t.Errorf("url: %s %v", u, err)
	}
}

func TestPrettyPrinter(t *testing.T) {
	p := newPrinter(false)
	p.loc = time.UTC
	p.payloadWidth = 20
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lines := []string{
		`{"ts":"2026-11-22T10:00:00.123Z","from":"alice","kind":"chat","payload":{"text":"hi"}}`,
		`{"ts":"2026-11-22T10:00:01.5Z","from":"alice","kind":"chat","context":{"id":"t1","type":"task"},"payload":1}`,
		`{"ts":"2026-11-22T10:00:02Z","from":"bob","to":["alice"],"kind":"step","context":{"id":"r1","type":"reasoning","parent":"t1"},"payload":"a very long payload that goes on"}`,
		`{"ts":"2026-11-22T10:00:03Z","from":"bob","kind":"step","context":{"id":"r1"}}`,
		`{"ts":"2026-11-22T10:00:04Z","from":"bob","kind":"step","context":{"id":"x","parent":"ghost"}}`,
		`{"ts":"2026-11-22T10:00:05Z","from":"bob","kind":"step","context":"a/b/c"}`,
		`{"ts":"bad","from":"system:gateway","kind":"system/error","payload":{"error":"reserved_kind","message":"no"}}`,
		`not json`,
	}
	want := []string{
		`10:00:00.123 alice           chat                  {"text":"hi"}`,
		`10:00:01.500 alice           chat                  [t1 task] 1`,
		`10:00:02.000 bob→alice       step                    [r1 reasoning] "a very long payloa…`,
		`10:00:03.000 bob             step                    [r1 reasoning]`,
		`10:00:04.000 bob             step                    [x]`,
		`10:00:05.000 bob             step                      [a/b/c]`,
		`03:04:05.000 system:gateway  system/error          reserved_kind: no`,
		`not json`,
	}
	for i, l := range lines {
		if got := p.format([]byte(l), now); got != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, got, want[i])
		}
	}
}

func TestPrettyColour(t *testing.T) {
	p := newPrinter(true)
	got := p.format([]byte(`{"ts":"2026-11-22T10:00:00Z","from":"a","kind":"k","context":{"id":"c"}}`), time.Now())
	if !strings.Contains(got, "\x1b[36m[c]\x1b[0m") {
		t.Errorf("no colour: %q", got)
	}
	if got := newPrinter(false).format([]byte(`{"from":"a","kind":"k"}`), time.Now()); strings.Contains(got, "\x1b") {
		t.Errorf("colour without a terminal: %q", got)
	}
}

func TestRenderTree(t *testing.T) {
	s := func(v string) *string { return &v }
	created := "2026-11-22T10:00:00Z"
	now, _ := time.Parse(time.RFC3339, "2026-11-22T10:02:05Z")
	list := []contextInfo{
		{ID: "task-1", Type: s("task"), State: "active", Messages: 3, Created: created},
		{ID: "orphan", Parent: s("ghost"), State: "active", Messages: 1, Created: created},
		{ID: "reason-1", Type: s("reasoning"), Parent: s("task-1"), State: "concluded", Reason: s("conclusion"), Messages: 12, Created: created},
		{ID: "leaf", Parent: s("reason-1"), State: "active", Messages: 2, Created: created},
	}
	var b bytes.Buffer
	renderTree(&b, list, now)
	want := `CONTEXT     TYPE       STATE                   MSGS  AGE
task-1      task       active                     3  2m05s
  reason-1  reasoning  concluded (conclusion)    12  2m05s
    leaf    -          active                     2  2m05s
orphan      -          active                     1  2m05s  (parent ghost)
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestRenderTreeReusedID(t *testing.T) {
	s := func(v string) *string { return &v }
	list := []contextInfo{
		{ID: "p", State: "concluded", Created: "2026-11-22T10:00:00Z"},
		{ID: "c1", Parent: s("p"), State: "concluded", Created: "2026-11-22T10:00:01Z"},
		{ID: "p", State: "active", Created: "2026-11-22T10:00:02Z"},
		{ID: "c2", Parent: s("p"), State: "active", Created: "2026-11-22T10:00:03Z"},
		{ID: "a", Parent: s("b"), State: "active"}, // a cycle has no root
		{ID: "b", Parent: s("a"), State: "active"},
	}
	var b bytes.Buffer
	renderTree(&b, list, time.Now())
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n")[1:] {
		names = append(names, strings.Fields(l)[0]+"@"+strings.Repeat(" ", len(l)-len(strings.TrimLeft(l, " "))))
	}
	got := strings.Join(names, "|")
	if got != "p@|c1@  |p@|c2@  |a@|b@  " {
		t.Errorf("got %q", got)
	}
}

func TestFillLine(t *testing.T) {
	sf := &sendFlags{kind: "chat"}
	b, id, inCtx, err := fillLine([]byte(`{"payload":{"a":1}}`), sf, []string{"bob"}, json.RawMessage(`"t/r"`))
	if err != nil || id == "" || !inCtx {
		t.Fatal(err, id, inCtx)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if m["id"] != id || m["kind"] != "chat" || m["context"] != "t/r" || m["to"].([]any)[0] != "bob" {
		t.Errorf("filled %s", b)
	}
	if !bytes.HasSuffix(b, []byte(`"payload":{"a":1}}`)) {
		t.Errorf("the line's own bytes are not kept: %s", b)
	}
	b, id, inCtx, err = fillLine([]byte(`{"id":"mine","kind":"k"}`), &sendFlags{kind: "chat"}, nil, nil)
	if err != nil || id != "mine" || inCtx || string(b) != `{"id":"mine","kind":"k"}` {
		t.Errorf("got %s %s %v %v", b, id, inCtx, err)
	}
	b, _, _, err = fillLine([]byte(`{}`), &sendFlags{}, nil, nil)
	if err != nil || !json.Valid(b) {
		t.Errorf("{}: %s %v", b, err)
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"a":1} x`, `null`} {
		if _, _, _, err := fillLine([]byte(bad), sf, nil, nil); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestSplitLinesAndCorrelation(t *testing.T) {
	got := splitLines([]byte("{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n"))
	if len(got) != 3 || string(got[0]) != `{"a":1}` || string(got[1]) != `{"b":2}` || string(got[2]) != `{"c":3}` {
		t.Errorf("splitLines: %q", got)
	}
	for line, want := range map[string]bool{
		`{"correlation_id":"x"}`:       true,
		`{"correlation_id":["y","x"]}`: true,
		`{"correlation_id":"y"}`:       false,
		`{}`:                           false,
	} {
		h, ok := parseHeader([]byte(line))
		if !ok || h.correlates("x") != want {
			t.Errorf("%s correlates x: %v, want %v", line, h.correlates("x"), want)
		}
	}
}
