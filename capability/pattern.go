package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
)

// node is one compiled value of a payload pattern.
type node struct {
	op nodeOp
	// str is a string pattern as written: a payload string equal to it
	// matches whatever the pattern is (MEW compares for equality first).
	str     string
	glob    *glob          // opGlob; opNot when the negated pattern is a glob
	not     string         // opNot: the negated pattern, after the "!"
	re      *regexp.Regexp // opRegexp
	reInsts int            // opRegexp: the program's size, for the work budget
	num     float64        // opNumber
	b       bool           // opBool
	anyOf   []*node        // opAnyOf
	entries []entry        // opObject
}

type nodeOp uint8

const (
	opObject  nodeOp = iota // every entry holds
	opAnyOf                 // an array: one of its values matches
	opLiteral               // a string without wildcards: equal
	opGlob                  // a string with * or ?
	opNot                   // "!" and a glob or literal: a string that does not match it
	opRegexp                // "/…/": a string the regular expression finds a match in
	opNumber                // a number: equal as a float64, as JavaScript compares
	opBool
	opNull
)

// entry is one key of an object pattern and the pattern of its value.
type entry struct {
	key  string
	glob *glob // the key has * or ?: every key of the payload it matches
	deep bool  // the key is "**": a value anywhere below the object
	val  *node
}

// compiler holds what one payload pattern has used of its bounds.
type compiler struct {
	dec   *json.Decoder
	nodes int
}

// compilePayload compiles a payload pattern. It returns a nil node for {},
// which matches any payload, and on an error the path of the value at
// fault.
func compilePayload(raw []byte) (*node, string, error) {
	if len(raw) > MaxPatternBytes {
		return nil, "payload", fmt.Errorf("%w: a payload pattern of %d bytes (at most %d)", ErrTooLarge, len(raw), MaxPatternBytes)
	}
	c := &compiler{dec: json.NewDecoder(bytes.NewReader(raw)), nodes: 1}
	c.dec.UseNumber()
	tok, err := c.dec.Token()
	if err != nil {
		return nil, "payload", fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if tok != json.Delim('{') {
		return nil, "payload", ErrNotObject
	}
	n, path, err := c.object("payload", 1, false)
	if err != nil {
		return nil, path, err
	}
	if _, err := c.dec.Token(); err != io.EOF {
		return nil, "payload", fmt.Errorf("%w: data after the pattern's object", ErrSyntax)
	}
	if len(n.entries) == 0 {
		return nil, "", nil
	}
	return n, "", nil
}

// value compiles the value whose first token is tok. deep is true under
// a "**" key, where objects are refused: looking for an object at every
// depth of a payload would cost its size times its depth.
func (c *compiler) value(tok json.Token, path string, depth int, deep bool) (*node, string, error) {
	if c.nodes++; c.nodes > MaxPatternNodes {
		return nil, path, fmt.Errorf("%w: more than %d values in a payload pattern", ErrTooLarge, MaxPatternNodes)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth++; depth > MaxPatternDepth {
			return nil, path, fmt.Errorf("%w: nested deeper than %d", ErrTooLarge, MaxPatternDepth)
		}
		if t == '{' {
			if deep {
				return nil, path, fmt.Errorf(`%w: an object under "**" (only strings, numbers, true, false, null and lists of them)`, ErrUnsupported)
			}
			return c.object(path, depth, deep)
		}
		return c.array(path, depth, deep)
	case string:
		n, err := compileString(t)
		return n, path, err
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return nil, path, fmt.Errorf("%w: number %s out of range", ErrSyntax, t)
		}
		return &node{op: opNumber, num: f}, "", nil
	case bool:
		return &node{op: opBool, b: t}, "", nil
	case nil:
		return &node{op: opNull}, "", nil
	}
	return nil, path, fmt.Errorf("%w: unexpected %v", ErrSyntax, tok)
}

// object compiles an object pattern whose "{" was read.
func (c *compiler) object(path string, depth int, deep bool) (*node, string, error) {
	n := &node{op: opObject}
	seen := make(map[string]bool)
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return nil, path, fmt.Errorf("%w: %v", ErrSyntax, err)
		}
		key := tok.(string) // the decoder allows nothing else here
		at := path + "." + key
		if seen[key] {
			return nil, at, fmt.Errorf("%w: key %q twice", ErrSyntax, key)
		}
		seen[key] = true
		e := entry{key: key}
		switch {
		case key == "**":
			e.deep = true
		case strings.HasPrefix(key, "$"):
			return nil, at, fmt.Errorf("%w: JSONPath keys (%q)", ErrUnsupported, key)
		case hasWildcard(key):
			if strings.HasPrefix(key, "!") {
				return nil, at, fmt.Errorf("%w: a negated key glob (%q)", ErrUnsupported, key)
			}
			if e.glob, err = compileGlob(key); err != nil {
				return nil, at, wrapSyntax(err)
			}
		}
		vt, err := c.dec.Token()
		if err != nil {
			return nil, at, fmt.Errorf("%w: %v", ErrSyntax, err)
		}
		v, p, err := c.value(vt, at, depth, deep || e.deep)
		if err != nil {
			return nil, p, err
		}
		e.val = v
		n.entries = append(n.entries, e)
	}
	if _, err := c.dec.Token(); err != nil { // the closing "}"
		return nil, path, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return n, "", nil
}

// array compiles a list of patterns, which matches a value that one of
// them matches, whose "[" was read. It does not match a list.
func (c *compiler) array(path string, depth int, deep bool) (*node, string, error) {
	n := &node{op: opAnyOf}
	for i := 0; c.dec.More(); i++ {
		tok, err := c.dec.Token()
		if err != nil {
			return nil, path, fmt.Errorf("%w: %v", ErrSyntax, err)
		}
		v, p, err := c.value(tok, fmt.Sprintf("%s[%d]", path, i), depth, deep)
		if err != nil {
			return nil, p, err
		}
		n.anyOf = append(n.anyOf, v)
	}
	if _, err := c.dec.Token(); err != nil { // the closing "]"
		return nil, path, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return n, "", nil
}

// Literal reports whether s, written as a string pattern, matches the
// string s alone: it is no regular expression, negation or glob. An
// "always" approval grants a tool by its name only when it is, so that a
// tool named "*" is never granted as every tool.
func Literal(s string) bool {
	n, err := compileString(s)
	return err == nil && n.op == opLiteral
}

// compileString reads a string pattern as MEW's matcher does, in its
// order: a regular expression between slashes, then a negation, then a
// glob, else a literal.
func compileString(s string) (*node, error) {
	n := &node{str: s}
	switch {
	case len(s) >= 2 && s[0] == '/' && s[len(s)-1] == '/':
		n.op = opRegexp
		if len(s) > MaxStringPatternBytes {
			return nil, fmt.Errorf("%w: a regular expression of %d bytes (at most %d)", ErrTooLarge, len(s), MaxStringPatternBytes)
		}
		src := s[1 : len(s)-1]
		re, err := syntax.Parse(src, syntax.Perl)
		if err != nil {
			// MEW's are JavaScript's; RE2 lacks lookaround and
			// backreferences, whose cost has no bound.
			return nil, fmt.Errorf("%w: regular expression %s: %v (RE2 syntax)", ErrSyntax, s, err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			return nil, fmt.Errorf("%w: regular expression %s: %v", ErrSyntax, s, err)
		}
		if n.reInsts = len(prog.Inst); n.reInsts > MaxRegexpInstructions {
			return nil, fmt.Errorf("%w: regular expression %s compiles to %d instructions (at most %d)", ErrTooLarge, s, n.reInsts, MaxRegexpInstructions)
		}
		n.re = regexp.MustCompile(src) // parsed above
	case strings.HasPrefix(s, "!"):
		n.op = opNot
		rest := s[1:]
		n.not = rest
		switch {
		case rest == "":
			return nil, fmt.Errorf(`%w: "!" negates nothing`, ErrSyntax)
		case rest[0] == '!':
			return nil, fmt.Errorf("%w: a double negation (%q)", ErrUnsupported, s)
		case hasWildcard(rest):
			g, err := compileGlob(rest)
			if err != nil {
				return nil, wrapSyntax(err)
			}
			n.glob = g
		case strings.ContainsAny(rest, "[]{}()"):
			// micromatch reads these as a class, brace or extglob even
			// without a wildcard.
			return nil, fmt.Errorf("%w: brackets, braces or parentheses in a negation (%q)", ErrUnsupported, s)
		default:
			if len(s) > MaxStringPatternBytes {
				return nil, fmt.Errorf("%w: a negation of %d bytes (at most %d)", ErrTooLarge, len(s), MaxStringPatternBytes)
			}
		}
	case hasWildcard(s):
		n.op = opGlob
		g, err := compileGlob(s)
		if err != nil {
			return nil, wrapSyntax(err)
		}
		n.glob = g
	default:
		n.op = opLiteral
	}
	return n, nil
}

// wrapSyntax marks a glob error that is not already one of the package's
// errors as ErrSyntax.
func wrapSyntax(err error) error {
	if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnsupported) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrSyntax, err)
}

// canonical is a payload pattern's JSON with its keys sorted and its
// numbers written one way, so that two patterns that mean the same thing
// compare equal (Grants.RevokeCapabilities). {} and no pattern are both "".
func canonical(raw []byte) (string, error) {
	if raw == nil {
		return "", nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return string(b), nil
}
