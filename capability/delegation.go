package capability

import (
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// Delegation never amplifies (docs/protocol.md section 6, after MEW's
// "participants cannot grant capabilities they don't possess", macaroons
// and UCAN): a grantor gives only what it holds where the grant applies,
// its token's capabilities plus its grants in scope, and a grant made
// through another grant ends with it. Covers decides "holds"; Grant.Via
// records what a grant was made through, and PodGrants.EndThrough ends
// what was made through grants that ended.

// Covers reports whether s allows every envelope that capability i of
// granted allows: whether a grantor holding s may grant it. It decides
// conservatively, never covering what it cannot prove covered:
//
//   - a plain kind pattern covers a capability whose kind pattern it
//     covers (KindCovers), whatever that capability's payload pattern;
//   - a capability with a payload pattern covers one whose kind pattern
//     its own covers and whose payload pattern asks at least as much: each
//     key it names is named there with a value pattern it covers, where a
//     pattern covers an equal pattern, any string it matches written as a
//     literal ("read_*" covers "read_file"), and a list all of whose
//     choices it covers; a glob, negation or regular expression covers
//     other globs, negations and expressions only when they are written
//     the same way.
func (s *Set) Covers(granted *Set, i int) bool {
	if s == nil {
		return false
	}
	kind, g := granted.caps[i].Kind, granted.nodes[i]
	for _, p := range s.kinds {
		if KindCovers(p, kind) {
			return true
		}
	}
	if g == nil {
		return false // any payload: only a plain pattern covers it
	}
	for _, h := range s.shaped {
		if KindCovers(h.kind, kind) && h.payload.covers(g) {
			return true
		}
	}
	return false
}

// covers reports whether every value g matches, n matches.
func (n *node) covers(g *node) bool {
	if g.op == opAnyOf {
		for _, alt := range g.anyOf {
			if !n.covers(alt) {
				return false
			}
		}
		return true // [] matches nothing
	}
	if n.op == opAnyOf {
		for _, alt := range n.anyOf {
			if alt.covers(g) {
				return true
			}
		}
		return false
	}
	switch g.op {
	case opLiteral:
		// g matches one string: covered when n matches it.
		w := work{left: WorkBase}
		return n.match(gjson.Result{Type: gjson.String, Str: g.str}, &w)
	case opNumber:
		return n.op == opNumber && n.num == g.num
	case opBool:
		return n.op == opBool && n.b == g.b
	case opNull:
		return n.op == opNull
	case opGlob, opNot, opRegexp:
		return n.op == g.op && n.str == g.str
	case opObject:
		if n.op != opObject {
			return false
		}
		for i := range n.entries {
			e := &n.entries[i]
			j := slices.IndexFunc(g.entries, func(x entry) bool { return x.key == e.key })
			if j < 0 || !e.val.covers(g.entries[j].val) {
				return false
			}
		}
		return true
	}
	return false
}

// Allowing is Allows that also says which grant allows: the id of the
// first grant in force, in the order they were made, that allows the
// envelope, or "" and false.
func (g *Grants) Allowing(kind string, payload []byte, w Where) (string, bool) {
	l := g.cur.Load()
	if l == nil || reserved(kind) {
		return "", false
	}
	for i := range l.all {
		gr := &l.all[i]
		if gr.holdsAt(w) && gr.Capabilities.Allows(kind, payload) {
			return gr.ID, true
		}
	}
	return "", false
}

// Covering is the id of the first grant in force whose scope takes in w,
// the new grant's (its context with its ancestors, and its recipient
// alone when it has one: a grant scoped to a recipient covers only grants
// scoped to the same), that covers capability i of granted (Set.Covers),
// or "" and false.
func (g *Grants) Covering(granted *Set, i int, w Where) (string, bool) {
	for _, gr := range g.load() {
		if gr.holdsAt(w) && gr.Capabilities.Covers(granted, i) {
			return gr.ID, true
		}
	}
	return "", false
}

// EndThrough ends, for every recipient, the grants made through one of
// the grants named by ids (their Via names it), and the grants made
// through those, and so on, and returns them by recipient, in id order,
// then in the order they were made, so that every node tells of them in
// one order. ids are grants that ended (revoked, changed by a revocation,
// or ended with their context).
func (p *PodGrants) EndThrough(ids []string) []Ended {
	if len(ids) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	gone := slices.Clone(ids)
	var out []Ended
	for len(gone) > 0 {
		var next []string
		for id, g := range p.by {
			for _, gr := range g.endVia(gone) {
				out = append(out, Ended{Recipient: id, Grant: gr})
				next = append(next, gr.ID)
			}
		}
		gone = next
	}
	slices.SortStableFunc(out, func(a, b Ended) int { return strings.Compare(a.Recipient, b.Recipient) })
	return out
}

// endVia ends the grants made through one of ids, and returns them.
func (g *Grants) endVia(ids []string) []Grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ended, keep []Grant
	for _, gr := range g.load() {
		if slices.ContainsFunc(gr.Via, func(v string) bool { return slices.Contains(ids, v) }) {
			ended = append(ended, gr)
		} else {
			keep = append(keep, gr)
		}
	}
	if len(ended) > 0 {
		g.store(keep)
	}
	return ended
}
