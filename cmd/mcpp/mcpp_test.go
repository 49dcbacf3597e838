package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
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

func TestFilterFlags(t *testing.T) {
	parse := func(args ...string) (wire.Filter, error) {
		fs := newFlagSet("tail")
		var ff filterFlags
		ff.register(fs)
		if err := parseFlags(fs, args); err != nil {
			return wire.Filter{}, err
		}
		return ff.filter()
	}
	f, err := parse("--main=0", "--contexts", "none", "--types", "a, b", "--exclude_types", "x", "--subtree", "--echo=1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Query().Encode(), "contexts=none&echo=1&exclude_types=x&main=0&subtree=1&types=a%2Cb"; got != want {
		t.Errorf("query %s, want %s", got, want)
	}
	if f, _ := parse(); len(f.Query()) != 0 {
		t.Errorf("no flags: %v", f.Query())
	}
	if _, err := parse("--contexts", ""); err == nil {
		t.Error("--contexts '' accepted")
	}
	// A value the gateway does not know is the gateway's to refuse.
	if f, err := parse("--routing", "sideways"); err != nil || f.Routing != "sideways" {
		t.Errorf("%+v %v", f, err)
	}
}

func TestHistoryFlag(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, "20": 20, "all": client.HistoryAll} {
		if n, err := historyFlag(in); err != nil || n != want {
			t.Errorf("%q: %d %v", in, n, err)
		}
	}
	for _, bad := range []string{"-1", "some", "1.5"} {
		if _, err := historyFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestResumeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tail.id")
	r, err := openResumeFile(path)
	if err != nil || r.last != "" {
		t.Fatal(r, err)
	}
	for _, id := range []string{"env-1", "env-2", "env-2"} {
		if err := r.save(id); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "env-2\n" {
		t.Errorf("the file holds %q", b)
	}
	if r, err := openResumeFile(path); err != nil || r.last != "env-2" {
		t.Errorf("%+v %v", r, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left behind: %v", entries)
	}
	if err := os.WriteFile(path, []byte("two words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openResumeFile(path); err == nil {
		t.Error("a file that holds no id accepted")
	}
	if _, err := openResumeFile(filepath.Join(dir, "no-such-dir", "tail.id")); err == nil {
		t.Error("a file that cannot be written accepted")
	}
}

func TestFoldLines(t *testing.T) {
	list := []json.RawMessage{
		json.RawMessage(`{"id":"1","kind":"chat"}`),
		json.RawMessage(`{"id":"2","kind":"conclusion","context":{"id":"r1"}}`),
		json.RawMessage(`{"id":"3","kind":"system/context","context":{"id":"r1","type":"reasoning"}}`),
		json.RawMessage(`{"id":"4","kind":"step","context":{"id":"r1"}}`), // r1 again: a new, active context
		json.RawMessage(`{"id":"5","kind":"step","context":"a/b"}`),
	}
	if got := foldLines(list, true); !slices.Equal(got, []bool{false, true, false, false, false}) {
		t.Errorf("folded: %v", got)
	}
	if got := foldLines(list, false); slices.Contains(got, true) {
		t.Errorf("unfolded: %v", got)
	}
}

func TestPrettyReplay(t *testing.T) {
	p := newPrinter(false)
	p.loc = time.UTC
	now := time.Now()
	learnContexts(p.ctxs, []json.RawMessage{json.RawMessage(`{"kind":"system/context","context":{"id":"r1","type":"reasoning","parent":"t1"}}`)})
	replay := view{replayed: true, folded: true}
	for _, c := range []struct {
		line string
		v    view
		want string
	}{
		{`{"ts":"2026-11-22T10:00:00Z","from":"a","kind":"start","context":{"id":"t1","type":"task"}}`, replay,
			`10:00:00.000 a               start                 [t1 task]`},
		{`{"ts":"2026-11-22T10:00:01Z","from":"a","kind":"conclusion","context":{"id":"r1"},"payload":{"summary":"B"}}`, view{replayed: true, folded: true, fold: true},
			`10:00:01.000 a               conclusion              [r1 reasoning] ⤶ fold {"summary":"B"}`},
		{`{"ts":"2026-11-22T10:00:01Z","from":"system:gateway","kind":"system/context","context":{"id":"r1","type":"reasoning","parent":"t1"},"payload":{"event":"concluded","reason":"conclusion","stats":{"messages":4,"participants":["a"]}}}`, replay,
			`10:00:01.000 system:gateway  system/context          [r1 reasoning] concluded (conclusion): 4 messages from 1 participants ⤶ folded: 3 of its envelopes left out`},
		{`{"ts":"2026-11-22T10:00:02Z","from":"b","kind":"activity","lifecycle":{"mode":"transient","summary":"15 rows"},"payload":{"collapsed":true,"summary":"15 rows","consumed_by":"e9"}}`, replay,
			`10:00:02.000 b               activity              ⊟ collapsed, consumed by e9: 15 rows`},
		// Live, the same payload is only a payload.
		{`{"ts":"2026-11-22T10:00:02Z","from":"b","kind":"activity","lifecycle":{"mode":"transient","summary":"15 rows"},"payload":{"collapsed":true,"summary":"15 rows","consumed_by":"e9"}}`, view{},
			`10:00:02.000 b               activity              {"collapsed":true,"summary":"15 rows","consumed_by":"e9"}`},
	} {
		if got := p.formatView([]byte(c.line), now, c.v); got != c.want {
			t.Errorf("\n got %q\nwant %q", got, c.want)
		}
	}
	folded, collapsed := 12, 1
	resumed, notResumed := true, false
	for h, want := range map[*wire.HistoryInfo]string{
		{Replayed: 3, Folded: &folded, Collapsed: &collapsed}: "; 3 envelopes of history follow, folded (12 left out, 1 collapsed)",
		{Replayed: 1}:                       "; 1 envelope of history follow, unfolded",
		{Resumed: &resumed, Replayed: 7}:    "; resumed: 7 missed envelopes follow",
		{Resumed: &notResumed, Replayed: 0}: "; could not resume: envelopes may be missing",
		{Resumed: &notResumed, Replayed: 5}: "; could not resume (envelopes may be missing): 5 envelopes of history follow",
	} {
		if got := historySummary(h); got != want {
			t.Errorf("%+v: %q, want %q", h, got, want)
		}
	}
}

func TestNewLimiter(t *testing.T) {
	if newLimiter(0) != nil {
		t.Error("rate 0 paces")
	}
	l := newLimiter(20)
	start := time.Now()
	for range 3 {
		if err := wait(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	// It starts empty: three tokens at 20/s take about 150 ms.
	if d := time.Since(start); d < 120*time.Millisecond {
		t.Errorf("3 tokens at 20/s in %v: the limiter did not start empty", d)
	}
}

func TestRefusalText(t *testing.T) {
	got := refusalText(&client.RefusedError{StatusCode: 400, Code: wire.CodeInvalidPod, Message: "pod <x>"}, "connection")
	if got != `the gateway refused the connection (HTTP 400 invalid_pod): {"error":"invalid_pod","message":"pod <x>"}` {
		t.Errorf("%s", got)
	}
	if got := refusalText(&client.RefusedError{StatusCode: 502, Message: "bad gateway"}, "request"); got != "the gateway refused the request (HTTP 502): bad gateway" {
		t.Errorf("%s", got)
	}
}
