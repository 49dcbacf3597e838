package capability_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// parseCaps reads a capability list as it comes over the wire.
func parseCaps(t testing.TB, js string) []wire.Capability {
	t.Helper()
	var caps []wire.Capability
	if err := json.Unmarshal([]byte(js), &caps); err != nil {
		t.Fatalf("capabilities %s: %v", js, err)
	}
	return caps
}

func compile(t testing.TB, js string) *capability.Set {
	t.Helper()
	s, err := capability.Compile(parseCaps(t, js))
	if err != nil {
		t.Fatalf("Compile(%s): %v", js, err)
	}
	return s
}

// TestKindPatterns: plain kind patterns match as they always have
// (participant.Capabilities), and nothing grants system/*.
func TestKindPatterns(t *testing.T) {
	cases := []struct {
		caps []string
		kind string
		want bool
	}{
		{[]string{"*"}, "chat", true},
		{[]string{"*"}, "mcp/request:tools/call", true},
		{[]string{"*"}, "system/welcome", false},
		{[]string{"system/*"}, "system/error", false},
		{[]string{"chat"}, "chat", true},
		{[]string{"chat"}, "chat/x", false},
		{[]string{"chat"}, "cha", false},
		{[]string{"mcp/*"}, "mcp/request", true},
		{[]string{"mcp/*"}, "mcp/request:tools/call", true},
		{[]string{"mcp/*"}, "mcp", false},
		{[]string{"mcp/request:*"}, "mcp/request:tools/call", true},
		{[]string{"mcp/request:*"}, "mcp/response:tools/call", false},
		{[]string{"mcp*"}, "mcpx", true},
		{[]string{"mcp/*/x"}, "mcp/a/x", false}, // a * inside is a plain character
		{[]string{"mcp/*/x"}, "mcp/*/x", true},
		{[]string{"chat", "reasoning/*"}, "reasoning/step", true},
		{[]string{"chat", "reasoning/*"}, "mcp/request", false},
		{nil, "chat", false},
	}
	for _, c := range cases {
		s := capability.MustCompile(wire.Kinds(c.caps...))
		if got := s.Allows(c.kind, nil); got != c.want {
			t.Errorf("%q allows %q: %v, want %v", c.caps, c.kind, got, c.want)
		}
		if old := referenceCaps(c.caps).Allows(c.kind); old != c.want {
			t.Errorf("participant.Capabilities%q allows %q: %v: the table is wrong", c.caps, c.kind, old)
		}
	}
	var none *capability.Set
	if none.Allows("chat", nil) {
		t.Error("the nil Set allows chat")
	}
}

// TestMatchKindAgrees: MatchKind, which Set runs, answers as
// referenceMatch (the check the gateway ran before it), for every pattern
// and kind of up to three characters from a small alphabet.
func TestMatchKindAgrees(t *testing.T) {
	var words []string
	var grow func(prefix string)
	grow = func(prefix string) {
		words = append(words, prefix)
		if len(prefix) < 3 {
			for _, c := range []string{"a", "b", "*", "/"} {
				grow(prefix + c)
			}
		}
	}
	grow("")
	for _, p := range words {
		for _, k := range words {
			if got, want := capability.MatchKind(p, k), referenceMatch(p, k); got != want {
				t.Errorf("MatchKind(%q, %q) = %v, referenceMatch says %v", p, k, got, want)
			}
		}
	}
}

// payloadCase is one entry of testdata/payload_cases.json. The table was
// checked against MEW's own matcher (src/capability-matcher/matcher.ts of
// mew-protocol v0.11.0, with micromatch 4): its answer is want, or mew
// where the two differ on purpose (docs/protocol.md lists where).
type payloadCase struct {
	Name       string          `json:"name"`
	Capability wire.Capability `json:"capability"`
	Kind       string          `json:"kind"`
	Payload    json.RawMessage `json:"payload"`
	PayloadRaw *string         `json:"payload_raw"`
	Want       bool            `json:"want"`
	MEW        *bool           `json:"mew"`
}

func TestPayloadPatterns(t *testing.T) {
	data, err := os.ReadFile("testdata/payload_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []payloadCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			s, err := capability.Compile([]wire.Capability{c.Capability})
			if err != nil {
				t.Fatalf("Compile(%s): %v", c.Capability, err)
			}
			payload := []byte(c.Payload)
			if c.PayloadRaw != nil {
				payload = []byte(*c.PayloadRaw)
			}
			if got := s.Allows(c.Kind, payload); got != c.Want {
				t.Errorf("%s allows %s %s: %v, want %v", c.Capability, c.Kind, payload, got, c.Want)
			}
		})
	}
}

// TestPlainFirst: a plain pattern allows without the payload being read,
// so a payload pattern that would refuse it does not.
func TestPlainFirst(t *testing.T) {
	s := compile(t, `[{"kind": "mcp/request", "payload": {"method": "tools/list"}}, "mcp/*"]`)
	if !s.Allows("mcp/request", []byte(`{"method": "tools/call"}`)) {
		t.Error(`"mcp/*" does not allow mcp/request past a payload pattern that refuses it`)
	}
	if s.Plain() {
		t.Error("a Set with a payload pattern says it is plain")
	}
	if !compile(t, `["chat", {"kind": "note"}, {"kind": "x", "payload": {}}]`).Plain() {
		t.Error("a Set of kind patterns and {} payload patterns says it is not plain")
	}
}

func TestWire(t *testing.T) {
	in := parseCaps(t, `["chat", {"kind": "mcp/request", "payload": {"method": "tools/*"}}, {"kind": "note", "payload": {}}]`)
	s, err := capability.Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	in[1].Payload[2] = 'X' // the caller's bytes are not the Set's
	out, err := json.Marshal(s.Wire())
	if err != nil {
		t.Fatal(err)
	}
	want := `["chat",{"kind":"mcp/request","payload":{"method":"tools/*"}},{"kind":"note","payload":{}}]`
	if string(out) != want {
		t.Errorf("Wire() = %s, want %s", out, want)
	}
	if s.Len() != 3 {
		t.Errorf("Len() = %d, want 3", s.Len())
	}
	if !s.Allows("mcp/request", []byte(`{"method": "tools/call"}`)) {
		t.Error("changing the caller's bytes changed the Set")
	}
}

// TestCompileErrors: every pattern Compile refuses, with the error a
// user would read.
func TestCompileErrors(t *testing.T) {
	deep := `{"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": "x"}}}}}}}}}`
	var many strings.Builder
	many.WriteString(`{"v": [`)
	for i := range 70 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`"x"`)
	}
	many.WriteString(`]}`)
	cases := []struct {
		name, caps string
		err        error
		path, text string
	}{
		{"empty kind", `["chat", ""]`, capability.ErrEmptyKind, "kind", `capability 1 (kind ""): kind: empty kind pattern`},
		{"too deep", `[{"kind": "k", "payload": ` + deep + `}]`, capability.ErrTooLarge, "payload.a.b.c.d.e.f.g.h", "nested deeper than 8"},
		{"too many values", `[{"kind": "k", "payload": ` + many.String() + `}]`, capability.ErrTooLarge, "payload.v[62]", "more than 64 values"},
		{"too many bytes", `[{"kind": "k", "payload": {"v": "` + strings.Repeat("x", 5000) + `"}}]`, capability.ErrTooLarge, "payload", "at most 4096"},
		{"glob too long", `[{"kind": "k", "payload": {"v": "*` + strings.Repeat("x", 300) + `"}}]`, capability.ErrTooLarge, "payload.v", "a glob of 301 bytes"},
		{"too many segments", `[{"kind": "k", "payload": {"v": "*` + strings.Repeat("/x", 40) + `"}}]`, capability.ErrTooLarge, "payload.v", "more than 32 segments"},
		{"regexp too large", `[{"kind": "k", "payload": {"v": "/(?:[a-z]{1,30}){1,8}x/"}}]`, capability.ErrTooLarge, "payload.v", "instructions (at most 128)"},
		{"lookahead", `[{"kind": "k", "payload": {"v": "/a(?=b)/"}}]`, capability.ErrSyntax, "payload.v", "RE2 syntax"},
		{"JSONPath", `[{"kind": "k", "payload": {"$.params.name": "x"}}]`, capability.ErrUnsupported, "payload.$.params.name", "JSONPath"},
		{"negated key", `[{"kind": "k", "payload": {"!a*": "x"}}]`, capability.ErrUnsupported, "payload.!a*", "negated key glob"},
		{"brackets", `[{"kind": "k", "payload": {"v": "read_[ab]*"}}]`, capability.ErrUnsupported, "payload.v", `"[" in a glob`},
		{"braces", `[{"kind": "k", "payload": {"v": "{a,b}*"}}]`, capability.ErrUnsupported, "payload.v", "brace"},
		{"brackets in a negation", `[{"kind": "k", "payload": {"v": "!a[b]"}}]`, capability.ErrUnsupported, "payload.v", "negation"},
		{"bad escape", `[{"kind": "k", "payload": {"v": "a\\b*"}}]`, capability.ErrSyntax, "payload.v", `\ may only precede`},
		{"empty negation", `[{"kind": "k", "payload": {"v": "!"}}]`, capability.ErrSyntax, "payload.v", "negates nothing"},
		{"double negation", `[{"kind": "k", "payload": {"v": "!!x"}}]`, capability.ErrUnsupported, "payload.v", "double negation"},
		{"object under **", `[{"kind": "k", "payload": {"**": {"a": 1}}}]`, capability.ErrUnsupported, "payload.**", `an object under "**"`},
		{"object in a list under **", `[{"kind": "k", "payload": {"**": ["x", {"a": 1}]}}]`, capability.ErrUnsupported, "payload.**[1]", `an object under "**"`},
		{"repeated key", `[{"kind": "k", "payload": {"a": 1, "a": 2}}]`, capability.ErrSyntax, "payload.a", `key "a" twice`},
		{"number out of range", `[{"kind": "k", "payload": {"n": 1e400}}]`, capability.ErrSyntax, "payload.n", "out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := capability.Compile(parseCaps(t, c.caps))
			var pe *capability.PatternError
			switch {
			case err == nil:
				t.Fatalf("Compile(%.80s) = nil error", c.caps)
			case !errors.Is(err, c.err):
				t.Errorf("error %q is not %q", err, c.err)
			case !errors.As(err, &pe):
				t.Errorf("error %q is not a *PatternError", err)
			case pe.Path != c.path:
				t.Errorf("error %q: path %q, want %q", err, pe.Path, c.path)
			case !strings.Contains(err.Error(), c.text):
				t.Errorf("error %q does not say %q", err, c.text)
			}
		})
	}
}

// TestCompileGoErrors: what only a list built in Go can hold.
func TestCompileGoErrors(t *testing.T) {
	_, err := capability.Compile([]wire.Capability{{Kind: "k", Payload: json.RawMessage(`"x"`)}})
	if !errors.Is(err, capability.ErrNotObject) {
		t.Errorf("a string payload pattern: %v, want ErrNotObject", err)
	}
	_, err = capability.Compile([]wire.Capability{{Kind: "k", Payload: json.RawMessage(`{"a": `)}})
	if !errors.Is(err, capability.ErrSyntax) {
		t.Errorf("a truncated payload pattern: %v, want ErrSyntax", err)
	}
	_, err = capability.Compile([]wire.Capability{{Kind: "k", Payload: json.RawMessage(`{} {}`)}})
	if !errors.Is(err, capability.ErrSyntax) {
		t.Errorf("two objects: %v, want ErrSyntax", err)
	}
	var caps []wire.Capability
	for range capability.MaxPayloadPatterns + 1 {
		caps = append(caps, wire.Capability{Kind: "k", Payload: json.RawMessage(`{"a": 1}`)})
	}
	_, err = capability.Compile(caps)
	var pe *capability.PatternError
	if !errors.As(err, &pe) || !errors.Is(err, capability.ErrTooLarge) || pe.Index != capability.MaxPayloadPatterns {
		t.Errorf("%d payload patterns: %v, want ErrTooLarge at index %d", len(caps), err, capability.MaxPayloadPatterns)
	}
	// Plain patterns are not bounded: token files hold what they hold.
	if _, err := capability.Compile(wire.Kinds(strings.Split(strings.Repeat("k,", 1000), ",")[:1000]...)); err != nil {
		t.Errorf("1000 plain patterns: %v", err)
	}
}

// TestBudget: payloads built to make matching slow are refused quickly,
// and running out of budget never allows, negations included.
func TestBudget(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	cases := []struct {
		name, pattern string
		payload       string
	}{
		// The classic worst case of wildcard matching: each start of
		// the * compares the long literal again.
		{"glob", `{"v": "*` + strings.Repeat("a", 200) + `b"}`, `{"v": "` + long + `"}`},
		{"negated glob", `{"v": "!*` + strings.Repeat("a", 200) + `b"}`, `{"v": "` + long + `"}`},
		{"regexp", `{"v": "/(a|aa)*b/"}`, `{"v": "` + long + `"}`},
		{"many keys", `{"a": 1, "b": {"c": 1}, "d": [1, 2]}`, `{"x": [` + strings.Repeat(`"a",`, 1<<18) + `0]}`},
		{"deep", `{"**": "!*"}`, `{"a": ` + strings.Repeat(`[`, 10000) + `"x"` + strings.Repeat(`]`, 10000) + `}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			caps := []wire.Capability{{Kind: "k", Payload: json.RawMessage(c.pattern)}}
			s := capability.MustCompile(caps)
			start := time.Now()
			got := s.Allows("k", []byte(c.payload))
			took := time.Since(start)
			if got {
				t.Errorf("allowed")
			}
			// The budget is about 9 million units of a few nanoseconds
			// for these payloads; a slow or busy machine gets a wide margin.
			if took > 2*time.Second {
				t.Errorf("took %v", took)
			}
			t.Logf("%v", took)
		})
	}
	// A value 10,000 levels down is found in one pass.
	deep := capability.MustCompile(parseCaps(t, `[{"kind": "k", "payload": {"**": "x"}}]`))
	if !deep.Allows("k", []byte(`{"a": `+strings.Repeat(`[`, 10000)+`"x"`+strings.Repeat(`]`, 10000)+`}`)) {
		t.Error(`{"**": "x"} does not find "x" 10,000 levels down`)
	}
	// And a pattern that fits the budget still matches a large payload.
	s := capability.MustCompile(parseCaps(t, `[{"kind": "k", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}]`))
	big := `{"junk": "` + long + `", "method": "tools/call", "params": {"name": "read_file"}}`
	if !s.Allows("k", []byte(big)) {
		t.Error("a pattern of MEW's examples does not match a 1 MiB payload")
	}
}

func TestCoversKind(t *testing.T) {
	s := capability.MustCompile([]wire.Capability{{Kind: "chat"}, {Kind: "mcp/request", Payload: []byte(`{"method": "tools/list"}`)}})
	for kind, want := range map[string]bool{"chat": true, "mcp/request": true, "mcp/response": false, "system/error": false} {
		if got := s.CoversKind(kind); got != want {
			t.Errorf("CoversKind(%q) = %v, want %v", kind, got, want)
		}
	}
	if s.Allows("mcp/request", []byte(`{"method": "tools/call"}`)) {
		t.Error("the payload pattern allowed tools/call")
	}
}

// TestLiteral: the names an "always" approval may grant as themselves.
func TestLiteral(t *testing.T) {
	for s, want := range map[string]bool{
		"echo": true, "read_file": true, "a.b-c": true, "tools/call": true, "/": true, "a/b/": true, "[x]": true,
		"*": false, "read_*": false, "?": false, "**": false, "/.*/": false, "/a/": false, "!x": false, "a?b": false,
	} {
		if got := capability.Literal(s); got != want {
			t.Errorf("Literal(%q) = %v, want %v", s, got, want)
		}
	}
}
