package capability_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/wire"
)

// FuzzMatch feeds arbitrary capabilities and envelopes to Compile and
// Allows. Nothing may panic or take long, and the answer must be the one
// of a reference written from docs/protocol.md's rules alone, with other
// means: referenceMatch for kinds; for payloads, encoding/json and
// recursion where the package uses gjson and one pass, and RE2 where it
// walks globs itself. Run it with
//
//	go test -fuzz FuzzMatch ./capability/
func FuzzMatch(f *testing.F) {
	data, err := os.ReadFile("testdata/payload_cases.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []payloadCase
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		payload := []byte(c.Payload)
		if c.PayloadRaw != nil {
			payload = []byte(*c.PayloadRaw)
		}
		f.Add(c.Capability.Kind, string(c.Capability.Payload), c.Kind, payload)
	}
	f.Add("mcp/*", "", "mcp/request", []byte(nil))
	f.Add("*", "", "system/welcome", []byte(nil))
	f.Add("chat", "", "chat", []byte(`{}`))
	f.Add("k", `{"a": "x/**/y*", "b*": ["/^\\d+$/", "!z?"]}`, "k", []byte(`{"a": "x/p/q/yy", "bb": "12"}`))

	f.Fuzz(func(t *testing.T, capKind, pattern, kind string, payload []byte) {
		c := wire.Capability{Kind: capKind}
		if pattern != "" {
			c.Payload = json.RawMessage(pattern)
		}
		s, err := capability.Compile([]wire.Capability{c})
		if err != nil {
			return // refused with an error: what Compile is for
		}
		start := time.Now()
		got := s.Allows(kind, payload)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Allows took %v", d)
		}
		if strings.HasPrefix(kind, "system/") || !referenceMatch(capKind, kind) {
			if got {
				t.Fatalf("%s allows %q", c, kind)
			}
			return
		}
		if c.Payload == nil {
			if !got {
				t.Fatalf("%s does not allow %q", c, kind)
			}
			return
		}
		want, ok := refAllows(c.Payload, payload)
		if ok && got != want {
			t.Fatalf("%s on %s: %v, the reference says %v", c, payload, got, want)
		}
	})
}

// refAllows is the reference answer for a payload pattern, and whether
// there is one: the payload must be JSON encoding/json reads as the
// gateway's receivers do, with no repeated key (where the package is
// stricter on purpose).
func refAllows(pattern, payload []byte) (want, ok bool) {
	var p any
	if err := json.Unmarshal(pattern, &p); err != nil {
		return false, false
	}
	var v any = map[string]any{}
	if len(bytes.TrimSpace(payload)) > 0 {
		if !utf8.Valid(payload) || repeatsKey(payload) {
			return false, false
		}
		if err := json.Unmarshal(payload, &v); err != nil {
			return false, false
		}
		if _, obj := v.(map[string]any); !obj {
			v = map[string]any{}
		}
	}
	return refMatch(p, v), true
}

func repeatsKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type level struct {
		obj  bool
		keys map[string]bool
		key  bool // the next string is a key
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, isStr := tok.(string); isStr && top != nil && top.obj && top.key {
			if top.keys[s] {
				return true
			}
			top.keys[s] = true
			top.key = false
			continue
		}
		if top != nil && top.obj {
			top.key = true // a value was read (or begins): a key comes next
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{obj: true, keys: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &level{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].obj {
				stack[len(stack)-1].key = true
			}
		}
	}
}

func refMatch(p, v any) bool {
	switch p := p.(type) {
	case map[string]any:
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for k, pv := range p {
			if !refEntry(k, pv, obj) {
				return false
			}
		}
		return true
	case []any:
		for _, alt := range p {
			if refMatch(alt, v) {
				return true
			}
		}
		return false
	case string:
		s, ok := v.(string)
		if !ok {
			return false
		}
		switch {
		case s == p:
			return true
		case len(p) >= 2 && p[0] == '/' && p[len(p)-1] == '/':
			return regexp.MustCompile(p[1 : len(p)-1]).MatchString(s)
		case strings.HasPrefix(p, "!"):
			if strings.ContainsAny(p[1:], "*?") {
				return s != p[1:] && !refGlob(p[1:], s)
			}
			return s != p[1:]
		case strings.ContainsAny(p, "*?"):
			return refGlob(p, s)
		}
		return false
	default: // numbers, booleans, null: equal
		return p == v
	}
}

func refEntry(k string, pv any, obj map[string]any) bool {
	switch {
	case k == "**":
		return refBelow(pv, obj)
	case strings.ContainsAny(k, "*?"):
		for kk, v := range obj {
			if (kk == k || refGlob(k, kk)) && refMatch(pv, v) {
				return true
			}
		}
		return false
	}
	v, ok := obj[k]
	return ok && refMatch(pv, v)
}

// refBelow: a value that is neither object nor list, anywhere below v.
func refBelow(p, v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			if refBelow(p, x) {
				return true
			}
		}
		return false
	case []any:
		for _, x := range v {
			if refBelow(p, x) {
				return true
			}
		}
		return false
	}
	return refMatch(p, v)
}

// refGlob matches a glob segment by segment, recursively for **, each
// segment with a regular expression.
func refGlob(g, s string) bool {
	if s == "" {
		return false
	}
	ps, ts := strings.Split(g, "/"), strings.Split(s, "/")
	memo := map[[2]int]bool{}
	var match func(i, j int) bool
	match = func(i, j int) bool {
		key := [2]int{i, j}
		if r, ok := memo[key]; ok {
			return r
		}
		var r bool
		switch {
		case i == len(ps):
			r = j == len(ts)
		case ps[i] == "**":
			r = match(i+1, j) || j < len(ts) && !strings.HasPrefix(ts[j], ".") && match(i, j+1)
		default:
			r = j < len(ts) && refSegment(ps[i], ts[j], i == len(ps)-1) && match(i+1, j+1)
		}
		memo[key] = r
		return r
	}
	return match(0, 0)
}

func refSegment(p, s string, last bool) bool {
	if last && p == "*" && s == "" {
		return false
	}
	if strings.HasPrefix(s, ".") && !strings.HasPrefix(p, ".") {
		return false
	}
	var re strings.Builder
	re.WriteString(`^(?s)`)
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
			re.WriteString(regexp.QuoteMeta(p[i : i+1]))
		case '*':
			re.WriteString(`.*`)
		case '?':
			re.WriteString(`.`)
		default:
			re.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	re.WriteString(`$`)
	return regexp.MustCompile(re.String()).MatchString(s)
}
