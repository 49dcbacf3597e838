package capability

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// One reading of a payload (docs/protocol.md section 2). A payload
// pattern is matched key by key, case-sensitively, while receivers read
// JSON in several ways: Go's encoding/json matches a struct's field names
// ignoring case and takes the last of two keys that do, JavaScript takes
// the last of two equal keys, gjson the first. An object with two keys
// equal ignoring case ({"participant": "bot-1", "Participant": "admin"})
// can therefore be matched as one thing and acted on as another. The
// gateway refuses such a payload (ambiguous_payload) wherever it reads
// one, and reads the ones it takes case-sensitively (envelope.DecodePayload),
// so that what a pattern matched is what everyone acts on.

// maxLinearKeys is the most keys of one object compared pairwise; an
// object with more is checked with a set of folded keys.
const maxLinearKeys = 16

// Ambiguous reports whether raw, a JSON value, holds an object with two
// keys equal ignoring case (under Unicode simple case folding, as
// strings.EqualFold and Go's encoding/json compare them; escaped keys are
// read unescaped), at any depth; identical keys count too; and whether it
// holds a key with a NUL ("name\u0000" is "name" to a parser that reads
// C strings, a second "name" beside the first). It returns where: the
// object's path ("payload", "payload.params", "payload.items[]") and the
// two keys as written (for a key with a NUL, what precedes the NUL, then
// the key). It reads raw once, left to right, without
// recursing, so its cost is raw's length however deep it nests. raw that
// is not valid JSON gives no guarantee but never a panic.
func Ambiguous(raw []byte) (path, first, second string, ambiguous bool) {
	var stack []scope
	for i := 0; i < len(raw); {
		switch raw[i] {
		case '{':
			stack = append(stack, scope{object: true, expectKey: true})
			i++
		case '[':
			stack = append(stack, scope{})
			i++
		case '}', ']':
			if n := len(stack); n > 0 {
				stack = stack[:n-1]
			}
			i++
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
			i++
		case '"':
			j := stringEnd(raw, i)
			n := len(stack)
			if n == 0 || !stack[n-1].object || !stack[n-1].expectKey {
				i = j // a value
				continue
			}
			s := &stack[n-1]
			s.expectKey = false
			key := keyOf(raw[i:j])
			if prev, dup := s.add(key); dup {
				return pathOf(stack), prev, key, true
			}
			i = j
		default:
			i++
		}
	}
	return "", "", "", false
}

// scope is one open object or array of Ambiguous's walk.
type scope struct {
	object    bool
	expectKey bool     // the next string is a key
	keys      []string // the object's keys so far, as written, until maxLinearKeys
	folded    map[string]string
	last      string // the latest key, for the path
}

// add records key and reports the earlier key it equals ignoring case,
// or, for a key with a NUL, what a C string reads of it.
func (s *scope) add(key string) (string, bool) {
	s.last = key
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i], true
	}
	if s.folded == nil {
		for _, k := range s.keys {
			if strings.EqualFold(k, key) {
				return k, true
			}
		}
		if len(s.keys) < maxLinearKeys {
			s.keys = append(s.keys, key)
			return "", false
		}
		s.folded = make(map[string]string, 2*maxLinearKeys)
		for _, k := range s.keys {
			s.folded[fold(k)] = k
		}
		s.keys = nil
	}
	f := fold(key)
	if k, ok := s.folded[f]; ok {
		return k, true
	}
	s.folded[f] = key
	return "", false
}

// pathOf is the path of the innermost open object, from the payload down.
func pathOf(stack []scope) string {
	var b strings.Builder
	b.WriteString("payload")
	for i := 0; i < len(stack)-1; i++ {
		if stack[i].object {
			b.WriteByte('.')
			b.WriteString(stack[i].last)
		} else {
			b.WriteString("[]")
		}
	}
	return b.String()
}

// stringEnd is the index just after the JSON string that starts at raw[i]
// (a '"'), or len(raw) if it does not end.
func stringEnd(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(raw)
}

// keyOf is the text of a JSON string token (its quotes included), its
// escapes read.
func keyOf(tok []byte) string {
	if bytes.IndexByte(tok, '\\') < 0 {
		if len(tok) >= 2 {
			return string(tok[1 : len(tok)-1])
		}
		return ""
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return string(tok) // not JSON: compared as it is
	}
	return s
}

// fold maps s to one representative of the strings equal to it under
// strings.EqualFold: each rune to the smallest rune of its case-folding
// orbit ('K', 'k' and the Kelvin sign all to 'K').
func fold(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToUpper(s) // 'A' < 'a': the orbit's smallest
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

func foldRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least
}
