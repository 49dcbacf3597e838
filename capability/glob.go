package capability

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A glob is a payload pattern string with * or ? in it, matched as MEW's
// matcher (micromatch) matches, in the subset docs/protocol.md lists:
//
//   - the value is cut into segments at "/";
//   - * matches any run of characters within one segment, ? one character
//     (not "/");
//   - a segment that is exactly ** matches any number of whole segments,
//     none included; ** anywhere else is *;
//   - no wildcard matches the "." that begins a segment: "*" does not
//     match ".env", "/public/**" does not match "/public/.env"; a pattern
//     segment that begins with a literal "." may ("/public/.*");
//   - \ makes the next character literal; it may precede * ? \ [ ] { } ( )
//     only;
//   - brackets, braces and parentheses (micromatch's classes, braces and
//     extglobs) are refused rather than read differently from MEW;
//   - the empty string matches no glob, and a last segment of "*" does
//     not match an empty one ("a/*" does not match "a/").
//
// Matching costs at most about the value's length times the pattern's, and
// each step is charged to the check's work budget.
type glob struct {
	segs []globSeg
}

// globSeg is one "/"-separated segment of a glob.
type globSeg struct {
	globstar bool      // the segment is "**"
	toks     []globTok // otherwise: what it is made of, in order
	dot      bool      // it begins with a literal ".", so it may match a segment that does
	lone     bool      // it is "*" alone
}

// globTok is a literal run of characters or one wildcard.
type globTok struct {
	lit  string
	wild byte // '*' or '?'; 0 for a literal
}

// hasWildcard reports whether s is a glob rather than a literal string:
// MEW's matcher tells them apart the same way.
func hasWildcard(s string) bool {
	return strings.ContainsAny(s, "*?")
}

var errGlobEscape = errors.New(`\ may only precede * ? \ [ ] { } ( ) in a glob`)

func compileGlob(s string) (*glob, error) {
	if len(s) > MaxStringPatternBytes {
		return nil, fmt.Errorf("%w: a glob of %d bytes (at most %d)", ErrTooLarge, len(s), MaxStringPatternBytes)
	}
	g := &glob{}
	for seg := range strings.SplitSeq(s, "/") {
		if len(g.segs) == MaxGlobSegments {
			return nil, fmt.Errorf("%w: a glob of more than %d segments", ErrTooLarge, MaxGlobSegments)
		}
		if seg == "**" {
			g.segs = append(g.segs, globSeg{globstar: true})
			continue
		}
		var gs globSeg
		var lit strings.Builder
		flush := func() {
			if lit.Len() > 0 {
				gs.toks = append(gs.toks, globTok{lit: lit.String()})
				lit.Reset()
			}
		}
		for i := 0; i < len(seg); i++ {
			switch c := seg[i]; c {
			case '\\':
				if i+1 == len(seg) || !strings.ContainsRune(`*?\[]{}()`, rune(seg[i+1])) {
					return nil, errGlobEscape
				}
				i++
				lit.WriteByte(seg[i])
			case '[', ']', '{', '}', '(', ')':
				return nil, fmt.Errorf("%w: %q in a glob (micromatch would read it as a class, brace or extglob); write \\%c for the character itself", ErrUnsupported, string(c), c)
			case '*', '?':
				flush()
				if n := len(gs.toks); c == '*' && n > 0 && gs.toks[n-1].wild == '*' {
					continue // ** inside a segment is *
				}
				gs.toks = append(gs.toks, globTok{wild: c})
			default:
				lit.WriteByte(c)
			}
		}
		flush()
		gs.lone = len(gs.toks) == 1 && gs.toks[0].wild == '*'
		gs.dot = len(gs.toks) > 0 && gs.toks[0].wild == 0 && gs.toks[0].lit[0] == '.'
		g.segs = append(g.segs, gs)
	}
	return g, nil
}

// match reports whether s matches the glob. It walks the value's segments
// once, keeping the set of pattern segments it may be at (one bit each: a
// small NFA), so ** never backtracks.
func (g *glob) match(s string, w *work) bool {
	if s == "" {
		return false
	}
	n := len(g.segs)
	done := uint64(1) << n
	at := g.closure(1)
	for {
		seg, rest, more := strings.Cut(s, "/")
		if !w.spend(1) {
			return false
		}
		var next uint64
		for i := range n {
			if at&(1<<i) == 0 {
				continue
			}
			p := &g.segs[i]
			switch {
			case p.globstar:
				if !strings.HasPrefix(seg, ".") {
					next |= 1 << i
				}
			case seg == "" && i == n-1 && p.lone:
				// micromatch: a last segment of "*" wants a character.
			case p.matchSegment(seg, w):
				next |= 1 << (i + 1)
			}
		}
		at = g.closure(next)
		if at == 0 {
			return false
		}
		if !more {
			return at&done != 0
		}
		s = rest
	}
}

// closure adds, for each ** the set is at, the segment after it: ** may
// match no segment at all.
func (g *glob) closure(at uint64) uint64 {
	for i := range g.segs {
		if at&(1<<i) != 0 && g.segs[i].globstar {
			at |= 1 << (i + 1)
		}
	}
	return at
}

// matchSegment matches one segment of the value (no "/" in it) against one
// segment of the pattern: the classic wildcard walk, which returns to the
// last * alone on a mismatch.
func (p *globSeg) matchSegment(s string, w *work) bool {
	if strings.HasPrefix(s, ".") && !p.dot {
		return false
	}
	toks := p.toks
	ti, si := 0, 0
	star, starSi := -1, 0
	for {
		if !w.spend(1) {
			return false
		}
		if ti < len(toks) {
			switch t := toks[ti]; t.wild {
			case '*':
				star, starSi = ti, si
				ti++
				continue
			case '?':
				if si < len(s) {
					_, size := utf8.DecodeRuneInString(s[si:])
					si += size
					ti++
					continue
				}
			default:
				// Charged whether it matches or not: the comparison
				// is the cost.
				if !w.spend(min(len(t.lit), len(s)-si)) {
					return false
				}
				if strings.HasPrefix(s[si:], t.lit) {
					si += len(t.lit)
					ti++
					continue
				}
			}
		} else if si == len(s) {
			return true
		}
		if star < 0 || starSi == len(s) {
			return false
		}
		_, size := utf8.DecodeRuneInString(s[starSi:])
		starSi += size
		ti, si = star+1, starSi
	}
}
