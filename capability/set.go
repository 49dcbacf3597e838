package capability

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/mcpp/gateway/wire"
)

// The bounds of a capability list. Each keeps a check cheap whatever the
// patterns are; the work budget (WorkBase) keeps it cheap whatever the
// payload is.
const (
	// MaxPayloadPatterns is the most capabilities with a payload pattern
	// one Set may hold: an envelope whose kind several of them match is
	// checked against each in turn. Plain kind patterns are not counted.
	MaxPayloadPatterns = 32
	// MaxPatternBytes is the largest payload pattern, as JSON.
	MaxPatternBytes = 4096
	// MaxPatternDepth is the deepest nesting of objects and arrays in a
	// payload pattern, the pattern's own object being 1: MEW's deepest
	// example is 3 ({"params": {"arguments": {"query": …}}}).
	MaxPatternDepth = 8
	// MaxPatternNodes is the most values in one payload pattern (objects,
	// arrays, strings, numbers, true, false and null, the outer object
	// included). The keys of one object are checked in one pass over the
	// payload's object, a bit each, so an object may hold fewer keys than
	// this.
	MaxPatternNodes = 64
	// MaxStringPatternBytes is the longest glob, negation ("!…") or regular
	// expression ("/…/"): their cost grows with their length. A plain
	// string compared exactly is bounded by MaxPatternBytes alone.
	MaxStringPatternBytes = 256
	// MaxGlobSegments is the most "/"-separated segments in one glob.
	MaxGlobSegments = 32
	// MaxRegexpInstructions bounds a regular expression's compiled program:
	// RE2 runs in time proportional to it times the string's length.
	MaxRegexpInstructions = 128
)

// The errors of Compile, each wrapped in a *PatternError that says which
// capability and where in its payload pattern.
var (
	// ErrEmptyKind: a capability's kind pattern is "".
	ErrEmptyKind = errors.New("empty kind pattern")
	// ErrNotObject: a payload pattern is not a JSON object.
	ErrNotObject = errors.New("a payload pattern must be a JSON object")
	// ErrTooLarge: a bound above is exceeded.
	ErrTooLarge = errors.New("too large")
	// ErrUnsupported: a form of MEW's matcher this one does not implement
	// (JSONPath keys, micromatch's classes and braces, regular expression
	// features outside RE2, objects under "**"). It is refused rather
	// than read differently from MEW.
	ErrUnsupported = errors.New("not supported")
	// ErrSyntax: the pattern is not valid JSON, repeats a key, or holds a
	// malformed glob, regular expression or number.
	ErrSyntax = errors.New("malformed pattern")
)

// PatternError is a capability that Compile refused.
type PatternError struct {
	Index      int             // its position in the list given to Compile
	Capability wire.Capability // the capability
	Path       string          // where in it: "kind", "payload", "payload.params.name", "payload.methods[1]"
	Err        error           // what is wrong: one of the Err values above, wrapped with details
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("capability %d (kind %q): %s: %v", e.Index, e.Capability.Kind, e.Path, e.Err)
}

func (e *PatternError) Unwrap() error { return e.Err }

// Set is a compiled capability list: what one participant may send. Build
// it once with Compile; it is immutable, so any number of goroutines may
// call Allows at once. The nil *Set allows nothing.
type Set struct {
	// kinds are the plain kind patterns, and those whose payload pattern
	// is {} (any payload), in the order given: Allows looks at them first,
	// with the loop the kind-only check before this package ran.
	kinds []string
	// shaped are the capabilities with a payload pattern, looked at only
	// when no plain pattern allows the kind.
	shaped []shaped
	// caps is the list as given, for Wire, and nodes their compiled
	// payload patterns, nil for none (or {}), by the same index: what
	// Covers compares.
	caps  []wire.Capability
	nodes []*node
}

// shaped is one capability with a payload pattern.
type shaped struct {
	kind    string
	payload *node
}

// Compile checks a capability list and compiles it into a Set. The first
// capability it cannot check is returned as a *PatternError; see the
// constants above for the bounds, and docs/protocol.md for the rules.
func Compile(caps []wire.Capability) (*Set, error) {
	s := &Set{caps: make([]wire.Capability, len(caps)), nodes: make([]*node, len(caps))}
	for i, c := range caps {
		// A copy, so that a caller reusing its byte slices cannot change
		// what the Set says it holds.
		c.Payload = bytes.Clone(c.Payload)
		s.caps[i] = c
		fail := func(path string, err error) (*Set, error) {
			return nil, &PatternError{Index: i, Capability: c, Path: path, Err: err}
		}
		if c.Kind == "" {
			return fail("kind", ErrEmptyKind)
		}
		if c.Payload == nil {
			s.kinds = append(s.kinds, c.Kind)
			continue
		}
		p, path, err := compilePayload(c.Payload)
		switch {
		case err != nil:
			return fail(path, err)
		case p == nil: // {}: any payload, so a plain kind pattern
			s.kinds = append(s.kinds, c.Kind)
		case len(s.shaped) == MaxPayloadPatterns:
			return fail("payload", fmt.Errorf("%w: more than %d capabilities with a payload pattern", ErrTooLarge, MaxPayloadPatterns))
		default:
			s.shaped = append(s.shaped, shaped{kind: c.Kind, payload: p})
			s.nodes[i] = p
		}
	}
	return s, nil
}

// MustCompile is Compile for lists known to be good (defaults, tests); it
// panics on an error.
func MustCompile(caps []wire.Capability) *Set {
	s, err := Compile(caps)
	if err != nil {
		panic(err)
	}
	return s
}

// Allows reports whether these capabilities let an envelope of this kind
// and payload (its raw JSON; nil when it has none) be sent. No capability
// allows the gateway's system/* kinds.
//
// Plain kind patterns are looked at first, with no allocation and without
// reading the payload. The payload is read only when none of them allows
// the kind and the kind pattern of a capability with a payload pattern
// matches it, and then within a work budget (WorkBase): a check that
// would cost more allows nothing.
func (s *Set) Allows(kind string, payload []byte) bool {
	if s == nil || reserved(kind) {
		return false
	}
	for _, p := range s.kinds {
		if MatchKind(p, kind) {
			return true
		}
	}
	if len(s.shaped) == 0 {
		return false
	}
	return s.allowsShaped(kind, payload)
}

// AllowsKind reports whether a plain kind pattern allows kind, so that
// Allows would not read the payload.
func (s *Set) AllowsKind(kind string) bool {
	if s == nil || reserved(kind) {
		return false
	}
	for _, p := range s.kinds {
		if MatchKind(p, kind) {
			return true
		}
	}
	return false
}

// allowsShaped is the rest of Allows, apart so that the work state stays
// out of the frame of the plain patterns' loop.
//
//go:noinline
func (s *Set) allowsShaped(kind string, payload []byte) bool {
	var w work
	return s.allowsPayload(kind, payload, &w)
}

// allowsPayload is the part of Allows that reads the payload. w is shared
// by every Set of one check (Grants.Allows), so that the budget is the
// check's, not each Set's.
func (s *Set) allowsPayload(kind string, payload []byte, w *work) bool {
	for i := range s.shaped {
		p := &s.shaped[i]
		if MatchKind(p.kind, kind) && p.payload.match(w.payload(payload), w) {
			return true
		}
	}
	return false
}

// CoversKind reports whether some capability's kind pattern matches kind,
// whatever its payload pattern: a refusal then says that the payload,
// not the kind, did not match.
func (s *Set) CoversKind(kind string) bool {
	if s == nil || reserved(kind) {
		return false
	}
	for _, p := range s.kinds {
		if MatchKind(p, kind) {
			return true
		}
	}
	for i := range s.shaped {
		if MatchKind(s.shaped[i].kind, kind) {
			return true
		}
	}
	return false
}

// Plain reports whether the Set holds only kind patterns (no payload
// pattern other than {}), so that Allows never reads a payload.
func (s *Set) Plain() bool { return s == nil || len(s.shaped) == 0 }

// Len is the number of capabilities in the Set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.caps)
}

// Wire is the list the Set was compiled from, as given (a copy): what a
// welcome or a presence event lists.
func (s *Set) Wire() []wire.Capability {
	if s == nil {
		return nil
	}
	out := make([]wire.Capability, len(s.caps))
	for i, c := range s.caps {
		out[i] = wire.Capability{Kind: c.Kind, Payload: bytes.Clone(c.Payload)}
	}
	return out
}

// without is the Set less the capabilities for which drop is true, and
// what was dropped.
func (s *Set) without(drop func(c wire.Capability) bool) (rest *Set, dropped []wire.Capability) {
	var keep []wire.Capability
	for _, c := range s.caps {
		if drop(c) {
			dropped = append(dropped, c)
		} else {
			keep = append(keep, c)
		}
	}
	// Every capability compiled once already, so a part of them compiles
	// too.
	return MustCompile(keep), dropped
}
