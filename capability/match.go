package capability

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// The work budget of one check. Matching a payload pattern charges the
// bytes it scans and the steps of its globs and regular expressions; a
// check that runs out allows nothing more (fail closed). With the bounds on
// patterns, this is what makes "no payload can make a check expensive"
// true: a check spends at most WorkBase + WorkPerPayloadByte × (payload
// bytes) units, each a byte scanned or a step taken (a few nanoseconds).
const (
	// WorkBase is the budget every check starts with: enough for every
	// pattern of MEW's examples on payloads of tens of kilobytes.
	WorkBase = 1 << 20
	// WorkPerPayloadByte is added per byte of payload, so that a large
	// payload can still be read by a few patterns: the gateway has spent
	// about one unit per byte already parsing the envelope.
	WorkPerPayloadByte = 8
	// regexpWork is charged per instruction of a regular expression per
	// byte of the string it is run on: RE2's step costs several of ours.
	regexpWork = 4
)

// work is the state of one check: its budget, and the payload, parsed
// once for all the patterns that read it.
type work struct {
	left    int
	started bool
	root    gjson.Result
}

// payload is the payload's top-level value, parsed on first use. A
// payload that is not an object (or is absent) is matched as {}, as MEW
// does: only a pattern with no keys matches it.
func (w *work) payload(raw []byte) gjson.Result {
	if w.started {
		return w.root
	}
	w.started = true
	w.left = WorkBase + WorkPerPayloadByte*len(raw)
	w.root = gjson.Result{Type: gjson.JSON, Raw: "{}"}
	// A string over the payload's bytes, not a copy: nothing of the
	// payload outlives the check (every Result is dropped when Allows
	// returns), and nothing writes to raw meanwhile.
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i < len(s) && s[i] == '{' {
		w.root.Raw = s[i:]
	}
	return w.root
}

// spend charges n units and reports whether the budget still holds.
func (w *work) spend(n int) bool {
	w.left -= n
	return w.left >= 0
}

func (w *work) exhausted() bool { return w.left < 0 }

// match reports whether the payload value v matches the pattern n.
func (n *node) match(v gjson.Result, w *work) bool {
	switch n.op {
	case opObject:
		return isObject(v) && n.matchObject(v, w)
	case opAnyOf:
		for _, alt := range n.anyOf {
			if alt.match(v, w) {
				return true
			}
		}
		return false
	case opNumber:
		return v.Type == gjson.Number && v.Num == n.num
	case opBool:
		return v.Type == gjson.True && n.b || v.Type == gjson.False && !n.b
	case opNull:
		return v.Type == gjson.Null && v.Raw == "null"
	}
	// A string pattern matches strings only.
	if v.Type != gjson.String || !w.spend(len(v.Str)) {
		return false
	}
	s := v.Str
	if s == n.str {
		return true
	}
	switch n.op {
	case opGlob:
		return n.glob.match(s, w)
	case opNot:
		// micromatch, too, takes a string equal to the pattern as a match.
		m := s == n.not || n.glob != nil && n.glob.match(s, w)
		// An exhausted budget made m false without a verdict; its
		// negation must not allow.
		return !m && !w.exhausted()
	case opRegexp:
		return w.spend(regexpWork*n.reInsts*(len(s)+1)) && n.re.MatchString(s)
	}
	return false // opLiteral, and not equal
}

func isObject(v gjson.Result) bool {
	return v.Type == gjson.JSON && len(v.Raw) > 0 && v.Raw[0] == '{'
}

// globHit is a payload key that a glob key of the pattern matched.
type globHit struct {
	entry int
	key   string
}

// matchObject checks an object pattern against a payload object, every
// key in one pass over the object.
//
// A key the pattern names must be present (negations included), as in
// MEW. A payload that repeats a key is matched on every copy of it: JSON
// leaves to each receiver which copy counts (JavaScript and Go take the
// last, gjson the first), so the pattern must hold whichever one it takes.
func (n *node) matchObject(obj gjson.Result, w *work) bool {
	if !w.spend(len(obj.Raw)) {
		return false
	}
	var seen, failed uint64
	var hits map[globHit]bool // by glob entry and key: every copy matched
	obj.ForEach(func(k, v gjson.Result) bool {
		for i := range n.entries {
			e := &n.entries[i]
			switch {
			case e.deep:
			case e.glob != nil:
				// micromatch takes a key equal to the glob as a match.
				if k.Str != e.key && !e.glob.match(k.Str, w) {
					continue
				}
				if hits == nil {
					hits = make(map[globHit]bool)
				}
				h := globHit{i, k.Str}
				prev, again := hits[h]
				hits[h] = e.val.match(v, w) && (!again || prev)
			case k.Str == e.key:
				seen |= 1 << i
				if !e.val.match(v, w) {
					failed |= 1 << i
				}
			}
		}
		return !w.exhausted()
	})
	if w.exhausted() {
		return false
	}
	for i := range n.entries {
		e := &n.entries[i]
		var ok bool
		switch {
		case e.deep:
			ok = e.val.matchBelow(obj.Raw, w)
		case e.glob != nil:
			for h, all := range hits {
				if h.entry == i && all {
					ok = true
					break
				}
			}
		default:
			ok = seen&(1<<i) != 0 && failed&(1<<i) == 0
		}
		if !ok {
			return false
		}
	}
	return true
}

// matchBelow reports whether a string, number, true, false or null
// anywhere within raw (an object or array, keys not counted) matches n
// (MEW's "**" key). It reads raw once, left to right, never recursing, so
// its cost is raw's length however deep the payload nests.
func (n *node) matchBelow(raw string, w *work) bool {
	if !w.spend(len(raw)) {
		return false
	}
	for i := 0; i < len(raw); {
		var tok string
		switch c := raw[i]; {
		case c == '"':
			j := endOfString(raw, i)
			k := j
			for k < len(raw) && isSpace(raw[k]) {
				k++
			}
			if k < len(raw) && raw[k] == ':' {
				i = j // a key
				continue
			}
			tok, i = raw[i:j], j
		case c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z':
			j := i + 1
			for j < len(raw) && (raw[j] == '.' || raw[j] == '+' || raw[j] == '-' ||
				raw[j] >= '0' && raw[j] <= '9' || raw[j] >= 'a' && raw[j] <= 'z' || raw[j] >= 'A' && raw[j] <= 'Z') {
				j++
			}
			tok, i = raw[i:j], j
		default:
			i++
			continue
		}
		if n.match(gjson.Parse(tok), w) {
			return true
		}
		if w.exhausted() {
			return false
		}
	}
	return false
}

// endOfString is the index just after the string that starts at raw[i]
// (a '"'), or len(raw) if it does not end.
func endOfString(raw string, i int) int {
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

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
