package capability

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcpp/gateway/wire"
)

// MaxGrants is the most grants one participant may hold in one pod: each
// in force is looked at for every envelope it sends.
const MaxGrants = 64

// The errors of Grants.
var (
	// ErrInvalidGrant: a grant without an id, a grantor or capabilities.
	ErrInvalidGrant = errors.New("invalid grant")
	// ErrDuplicateGrant: a grant with this id is in force already.
	ErrDuplicateGrant = errors.New("a grant with this id is in force already")
	// ErrTooManyGrants: the recipient holds MaxGrants grants already.
	ErrTooManyGrants = errors.New("too many grants")
	// ErrNoGrant: no grant with this id is in force: never made, revoked,
	// or ended with its context.
	ErrNoGrant = errors.New("no grant with this id is in force")
	// ErrNotGrantor: the grant was made by another participant, and only
	// its grantor may revoke it.
	ErrNotGrantor = errors.New("only its grantor may revoke a grant")
)

// Grant is one capability/grant in force: capabilities that one
// participant of a pod gave another at run time.
type Grant struct {
	// ID is the capability/grant envelope's id; it names the grant from
	// then on (MEW's grant_id).
	ID string
	// Grantor is the id of the participant that sent it.
	Grantor string
	// Context is the id of the context the grant is scoped to, or "" for
	// the whole pod. A scoped grant holds only for envelopes in that
	// context or below it, and ends when that context concludes.
	Context string
	// To is the one participant the envelopes it allows must be addressed
	// to (their to is exactly [To]), or "" for any recipients: an
	// "always" approval grants one tool of one server.
	To string
	// Capabilities are what it grants.
	Capabilities *Set
	// Via are the grants of its grantor it was made through: those that
	// gave the grantor capability/grant, or a capability it granted, where
	// its token did not. It ends when one of them ends (EndThrough).
	Via []string
}

// Grants are the grants one participant holds in one pod, enforced from
// the envelope after the one that changed them: Allows, called for every
// envelope, reads them without a lock (copy-on-write behind an atomic
// pointer), and Add, Revoke, RevokeCapabilities and EndContext, which are
// rare, replace them whole under a mutex. Applied in the order of the
// pod's log, the same operations leave every node of a cluster with the
// same grants. The zero value holds none and is ready to use.
type Grants struct {
	mu  sync.Mutex // serializes the writers; Allows does not take it
	cur atomic.Pointer[grantList]
}

// grantList is one immutable state of Grants.
type grantList struct {
	all    []Grant // in the order they were made
	scoped bool    // one of them has a Context
}

func (g *Grants) load() []Grant {
	if l := g.cur.Load(); l != nil {
		return l.all
	}
	return nil
}

// store publishes a new list; g.mu is held.
func (g *Grants) store(all []Grant) {
	l := &grantList{all: all}
	for _, gr := range all {
		l.scoped = l.scoped || gr.Context != ""
	}
	g.cur.Store(l)
}

// Where is where an envelope goes, what a grant's scope is checked
// against: the context it is in ("" when it names none) with the
// ancestors of that context (its parent, its parent's parent, and so on),
// and the recipients its to names (nil when it has none).
type Where struct {
	Context   string
	Ancestors []string
	To        []string
}

// Allows reports whether a grant in force lets the participant send an
// envelope of this kind and payload (raw JSON, nil when absent) where w
// says. An unscoped grant holds everywhere; one scoped to a context when
// that context is w's or one of its ancestors; one scoped to a recipient
// (Grant.To) when w.To is that recipient alone. The participant's own
// capabilities are not looked at: check them first (Set.Allows), as they
// need no context.
//
// Plain kind patterns of every grant in scope are looked at before any
// payload pattern, so the payload is read only when no kind pattern
// allows the kind, and then once, within one work budget for the check.
func (g *Grants) Allows(kind string, payload []byte, w Where) bool {
	l := g.cur.Load()
	if l == nil || reserved(kind) {
		return false
	}
	shaped := false
	for i := range l.all {
		gr := &l.all[i]
		if !gr.holdsAt(w) {
			continue
		}
		for _, p := range gr.Capabilities.kinds {
			if MatchKind(p, kind) {
				return true
			}
		}
		shaped = shaped || len(gr.Capabilities.shaped) > 0
	}
	if !shaped {
		return false
	}
	var budget work
	for i := range l.all {
		gr := &l.all[i]
		if gr.holdsAt(w) && gr.Capabilities.allowsPayload(kind, payload, &budget) {
			return true
		}
	}
	return false
}

// holdsAt reports whether the grant's scope takes in an envelope sent
// where w says: its context, and its recipient.
func (gr *Grant) holdsAt(w Where) bool {
	return (gr.Context == "" || gr.Context == w.Context || slices.Contains(w.Ancestors, gr.Context)) &&
		(gr.To == "" || len(w.To) == 1 && w.To[0] == gr.To)
}

// Scoped reports whether a grant in force is scoped to a context: when it
// is not, Allows never reads Where's ancestors, and the caller need not
// look them up.
func (g *Grants) Scoped() bool {
	l := g.cur.Load()
	return l != nil && l.scoped
}

// HoldsKind reports whether a grant in force, in any scope, has a
// capability whose kind pattern matches kind (Set.CoversKind).
func (g *Grants) HoldsKind(kind string) bool {
	for _, gr := range g.load() {
		if gr.Capabilities.CoversKind(kind) {
			return true
		}
	}
	return false
}

// List is the grants in force, in the order they were made.
func (g *Grants) List() []Grant {
	return slices.Clone(g.load())
}

// Add puts a grant in force. It refuses a grant without an id, a grantor
// or a capability (ErrInvalidGrant), one whose id is in force already
// (ErrDuplicateGrant) and one past MaxGrants (ErrTooManyGrants). Whether
// the grantor may grant, and whether a scope names a live context, are
// the caller's to check.
func (g *Grants) Add(gr Grant) error {
	switch {
	case gr.ID == "":
		return fmt.Errorf("%w: no id", ErrInvalidGrant)
	case gr.Grantor == "":
		return fmt.Errorf("%w: no grantor", ErrInvalidGrant)
	case gr.Capabilities.Len() == 0:
		return fmt.Errorf("%w: it grants no capability", ErrInvalidGrant)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.load()
	if slices.ContainsFunc(all, func(x Grant) bool { return x.ID == gr.ID }) {
		return fmt.Errorf("%w: %q", ErrDuplicateGrant, gr.ID)
	}
	if len(all) >= MaxGrants {
		return fmt.Errorf("%w: %d in force (at most %d)", ErrTooManyGrants, len(all), MaxGrants)
	}
	g.store(append(slices.Clip(all), gr))
	return nil
}

// Revoke ends the grant named id, which by must have made. It returns the
// grant as it was.
func (g *Grants) Revoke(id, by string) (Grant, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.load()
	i := slices.IndexFunc(all, func(x Grant) bool { return x.ID == id })
	if i < 0 {
		return Grant{}, fmt.Errorf("%w: %q", ErrNoGrant, id)
	}
	if all[i].Grantor != by {
		return Grant{}, fmt.Errorf("%w: %q was granted by %s", ErrNotGrantor, id, all[i].Grantor)
	}
	gr := all[i]
	g.store(slices.Delete(slices.Clone(all), i, i+1))
	return gr, nil
}

// Revocation is what RevokeCapabilities took from one grant.
type Revocation struct {
	Grant   Grant             // the grant as it was
	Removed []wire.Capability // what it no longer grants
	Ended   bool              // it grants nothing more, so it is no longer in force
}

// RevokeCapabilities takes capabilities away from the grants that by made
// (MEW's revocation by capabilities rather than by grant id). A named
// capability takes away each granted one that
//
//   - has the same kind pattern and a payload pattern equal to its own
//     (as JSON values: key order and number spelling do not count), or
//   - when it has no payload pattern, has a kind pattern it covers
//     (KindCovers), whatever its payload pattern: "mcp/*" takes away
//     "mcp/request" and {"kind": "mcp/request", "payload": {…}}.
//
// A grant left with no capability ends. The grants of other grantors are
// not touched. It returns what changed, in the order the grants were
// made: none when nothing matched. A malformed named capability is a
// *PatternError.
func (g *Grants) RevokeCapabilities(by string, caps []wire.Capability) ([]Revocation, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, keep, err := g.revocations(by, caps)
	if len(out) > 0 {
		g.store(keep)
	}
	return out, err
}

// Revokes reports whether RevokeCapabilities(by, caps) would take
// anything away, changing nothing: a revoke that would not is refused
// before it enters the pod's order.
func (g *Grants) Revokes(by string, caps []wire.Capability) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, _, err := g.revocations(by, caps)
	return len(out) > 0, err
}

// revocations works out what RevokeCapabilities takes away, and the
// grants that stay. Call it with mu held.
func (g *Grants) revocations(by string, caps []wire.Capability) (out []Revocation, keep []Grant, err error) {
	type named struct {
		kind, payload string // payload: canonical, "" for none
	}
	ns := make([]named, len(caps))
	for i, c := range caps {
		if c.Kind == "" {
			return nil, nil, &PatternError{Index: i, Capability: c, Path: "kind", Err: ErrEmptyKind}
		}
		p, err := canonical(c.Payload)
		if err != nil {
			return nil, nil, &PatternError{Index: i, Capability: c, Path: "payload", Err: err}
		}
		ns[i] = named{c.Kind, p}
	}
	taken := func(c wire.Capability) bool {
		cp, _ := canonical(c.Payload) // compiled once, so it is JSON
		for _, n := range ns {
			if n.payload == "" && KindCovers(n.kind, c.Kind) || n.kind == c.Kind && n.payload == cp {
				return true
			}
		}
		return false
	}
	for _, gr := range g.load() {
		if gr.Grantor != by {
			keep = append(keep, gr)
			continue
		}
		rest, removed := gr.Capabilities.without(taken)
		if len(removed) == 0 {
			keep = append(keep, gr)
			continue
		}
		ended := rest.Len() == 0
		out = append(out, Revocation{Grant: gr, Removed: removed, Ended: ended})
		if !ended {
			changed := gr
			changed.Capabilities = rest
			keep = append(keep, changed)
		}
	}
	return out, keep, nil
}

// EndContext ends every grant scoped to the context contextID, which has
// concluded, and returns them, so that their recipient can be told. Its
// subcontexts conclude with it, each with its own call.
func (g *Grants) EndContext(contextID string) []Grant {
	if contextID == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.load()
	var ended, keep []Grant
	for _, gr := range all {
		if gr.Context == contextID {
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

// PodGrants are the grants of one pod, by recipient. The gateway keeps
// the recipient's *Grants (For) with its connection, so that the check of
// each envelope reads them without a lookup.
//
// Lock order: PodGrants.mu before Grants.mu.
type PodGrants struct {
	mu sync.Mutex
	by map[string]*Grants
}

// For returns the grants of participant, making them (empty) the first
// time. Grants may be made to a participant before it joins, and outlive
// its connections: they last as long as the pod.
func (p *PodGrants) For(participant string) *Grants {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.by[participant]
	if g == nil {
		if p.by == nil {
			p.by = make(map[string]*Grants)
		}
		g = &Grants{}
		p.by[participant] = g
	}
	return g
}

// All lists the grants in force, by recipient (in id order), then in the
// order they were made: what an operator reads (the gateway's operator's
// API).
func (p *PodGrants) All() []Ended {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Ended
	for id, g := range p.by {
		for _, gr := range g.List() {
			out = append(out, Ended{Recipient: id, Grant: gr})
		}
	}
	slices.SortStableFunc(out, func(a, b Ended) int { return strings.Compare(a.Recipient, b.Recipient) })
	return out
}

// Ended is a grant that ended with its context, and its recipient.
type Ended struct {
	Recipient string
	Grant
}

// EndContext ends, for every recipient, the grants scoped to contextID,
// which has concluded. They are returned by recipient, in id order, then
// in the order they were made, so that every node tells of them in one
// order.
func (p *PodGrants) EndContext(contextID string) []Ended {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Ended
	for id, g := range p.by {
		for _, gr := range g.EndContext(contextID) {
			out = append(out, Ended{Recipient: id, Grant: gr})
		}
	}
	slices.SortStableFunc(out, func(a, b Ended) int { return strings.Compare(a.Recipient, b.Recipient) })
	return out
}
