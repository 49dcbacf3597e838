package contexts

import (
	"container/heap"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/limits"
	"github.com/mcpp/gateway/wire"
)

// Config holds the rules of a pod's contexts: the gateway's limits of
// contexts (--max-depth, --context-timeout, --context-retention,
// --conclusion-kinds, --max-contexts-per-…, --context-rate and
// --context-burst) and the registry's clock and timer.
type Config struct {
	limits.Contexts
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnDue, when set, is what the registry's timer calls when a context
	// is due to time out or be forgotten, instead of calling Expire
	// itself: the registry's owner then calls Expire under its own lock,
	// which comes before the registry's (a pod's order lock), so that the
	// events of what concluded take their place in the pod's order.
	OnDue func()
}

// Context is one registered context. Its fields are fixed at creation but
// for the counters and times, which change under the registry's lock.
type Context struct {
	ID, Type, Parent, Creator string
	// Incarnation is the id of the envelope that created the context: every
	// node of a cluster names this life of the id the same way.
	Incarnation string
	Depth       int
	Path        bool

	State    string
	Reason   string
	Messages int64
	Bytes    int64
	// Tokens is the token estimate of its envelopes (envelope.EstimateTokens),
	// summed, and ConclusionTokens that of its conclusion-kind ones. Like
	// Messages and Bytes they count the context's own envelopes, not its
	// sub-contexts': the history folds each context under its own
	// system/context event, a sub-context's too when its parent's
	// conclusion concludes it (docs/protocol.md section 8), so each
	// envelope's tokens are counted in exactly one context's figures.
	Tokens           int64
	ConclusionTokens int64
	Created          int64 // unix nanoseconds
	LastActivity     int64
	Concluded        int64
	Senders          []string

	limiter  *rate.Limiter
	deadline int64 // when the timeout heap next looks at it
	index    int   // in the timeout heap, -1 when not in it
	// floor is the least depth the context has, whatever becomes of its
	// parent: a path's segments, 2 under an unknown parent, 1 for a root.
	floor int
}

// Registry is the context registry of one pod.
type Registry struct {
	mu        sync.Mutex
	cfg       Config
	byID      map[string]*Context // the latest incarnation of each id, active or retained
	kids      map[string][]*Context
	active    int
	byCreator map[string]int
	timeouts  timeoutHeap
	retained  []*Context // concluded, oldest first
	timer     *time.Timer
	timerAt   int64
	onExpire  func([]Concluded)
	closed    bool
	paused    bool
	// The most entries each map has held since it was last rebuilt: a Go
	// map keeps the room of its largest size, so compact rebuilds one that
	// has shrunk well below it.
	peakByID, peakKids, peakCreators int
	// conclusions is cfg.ConclusionKinds as a set (fixed at creation, so
	// read without the lock).
	conclusions map[string]bool
}

// NewRegistry makes an empty registry. onExpire is called, with the
// registry locked, with the contexts that concluded by timeout (and their
// children), in the order their events must be sent; it must not call the
// registry.
func NewRegistry(cfg Config, onExpire func([]Concluded)) *Registry {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Registry{
		cfg: cfg, conclusions: cfg.ConclusionSet(), byID: make(map[string]*Context), kids: make(map[string][]*Context),
		byCreator: make(map[string]int), onExpire: onExpire,
	}
	r.timer = time.AfterFunc(time.Hour, r.fire)
	r.timer.Stop()
	return r
}

// Concludes reports whether kind concludes its context
// (--conclusion-kinds).
func (r *Registry) Concludes(kind string) bool { return r.conclusions[kind] }

// Request is one envelope in a context, as ingress sees it.
type Request struct {
	Context envelope.Context
	Kind    string
	Sender  string
	// EnvelopeID is the envelope's id (after the gateway filled it).
	EnvelopeID string
	Size       int
	// Tokens is the envelope's envelope.EstimateTokens, as relayed.
	Tokens int
	Now    time.Time
	// Duplicate is the history's duplicate_id verdict, nil when the id is
	// new, and SenderRate the sender's own rate verdict, nil when within its
	// rate. docs/protocol.md section 5 reports them after the context errors
	// that come before them in the table, and before the caps and
	// context_rate_limited that come after.
	Duplicate  *envelope.Error
	SenderRate *envelope.Error
	// Create is the sender's bucket for opening contexts.
	Create *rate.Limiter
}

// Accepted is what the registry recorded for an accepted envelope.
type Accepted struct {
	// Context is the registry's own, which other senders change under
	// the registry's lock: read it only in Accept's commit.
	Context *Context
	// Depth is the context's depth as the envelope was accepted, for
	// whoever reads it after the lock is let go.
	Depth     int
	Ancestors []string    // parent first
	Concluded []Concluded // contexts the envelope concluded, in event order
}

// Concluded is a context that has just concluded, with everything its
// system/context event needs (docs/protocol.md section 3), so that whoever
// writes the event never reads the registry again.
type Concluded struct {
	ID, Type, Parent, Reason string
	// Incarnation is the id of the envelope that created the context.
	Incarnation  string
	Depth        int
	Messages     int64
	Bytes        int64
	Participants []string
	Created      int64 // unix nanoseconds
	LastActivity int64
	At           int64 // when it concluded
	// Tokens, TokensFolded and TokensSaved are Context.Fold's figures.
	Tokens, TokensFolded, TokensSaved int64
	// Ancestors are the ancestor ids an envelope in the context had just
	// before it concluded, parent first: a subtree filter admits the event
	// exactly when it would admit a conclusion-kind envelope in it.
	Ancestors []string
}

// Accept checks req against the registry and, when it passes, records it and
// calls commit with the registry still locked, so that what commit publishes
// is in the same order as the registry's changes. acc is reused by the
// caller; Accept fills it.
func (r *Registry) Accept(req *Request, acc *Accepted, commit func(*Accepted)) *envelope.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &req.Context
	now := req.Now.UnixNano()

	cur := r.byID[c.ID]
	if cur != nil && cur.State != wire.StateActive {
		cur = nil // naming a concluded id opens a new context
	}
	depth := 0
	if cur != nil {
		if c.Type != "" && c.Type != cur.Type {
			return envelope.Errorf(wire.CodeContextConflict, "context %q was created with type %q, not %q", c.ID, cur.Type, c.Type)
		}
		if c.Parent != "" && c.Parent != cur.Parent {
			return envelope.Errorf(wire.CodeContextConflict, "context %q was created with parent %q, not %q", c.ID, cur.Parent, c.Parent)
		}
	} else {
		if c.Parent == c.ID || r.inChain(c.Parent, c.ID) {
			return envelope.Errorf(wire.CodeContextCycle, "context %q would be its own ancestor", c.ID)
		}
		depth = r.depthOf(c)
		if depth > r.cfg.MaxDepth {
			return envelope.Errorf(wire.CodeContextDepthExceeded, "context %q would have depth %d, over the limit of %d", c.ID, depth, r.cfg.MaxDepth)
		}
		// Contexts created earlier may name this id as their parent (a
		// chain built from the leaf up): they become its descendants, and
		// no chain may grow past the limit that way either.
		if deepest := r.deepest(c.ID, depth); deepest > r.cfg.MaxDepth {
			return envelope.Errorf(wire.CodeContextDepthExceeded,
				"context %q would make the registered contexts below it reach depth %d, over the limit of %d", c.ID, deepest, r.cfg.MaxDepth)
		}
	}
	if req.Duplicate != nil {
		return req.Duplicate
	}
	if cur == nil {
		if r.active >= r.cfg.MaxContextsPerPod {
			e := envelope.Errorf(wire.CodeContextLimitExceeded, "the pod has %d active contexts, the limit", r.active)
			e.Details = map[string]any{"limit": r.cfg.MaxContextsPerPod, "scope": "pod"}
			return e
		}
		if n := r.byCreator[req.Sender]; n >= r.cfg.MaxContextsPerParticipant {
			e := envelope.Errorf(wire.CodeContextLimitExceeded, "you have %d active contexts, the limit", n)
			e.Details = map[string]any{"limit": r.cfg.MaxContextsPerParticipant, "scope": "participant"}
			return e
		}
	}
	if req.SenderRate != nil {
		return req.SenderRate
	}
	if cur != nil {
		if ok, d := limits.Take(cur.limiter, req.Now); !ok {
			return limits.RateError(wire.CodeContextRateLimited, d, "context %q is over its rate of %g envelopes a second", c.ID, r.cfg.ContextRate)
		}
	} else {
		if req.Create != nil {
			if ok, d := limits.Take(req.Create, req.Now); !ok {
				return limits.RateError(wire.CodeContextRateLimited, d, "you open contexts faster than your rate allows")
			}
		}
		cur = r.create(c, req.Sender, strings.Clone(req.EnvelopeID), depth, now)
		cur.limiter.AllowN(req.Now, 1)
	}

	cur.count(req.Size, req.Tokens, r.conclusions[req.Kind])
	// Senders take their time before the lock, so now may be a little
	// older than what another sender already recorded.
	cur.LastActivity = max(cur.LastActivity, now)
	cur.addSender(req.Sender)
	acc.Context, acc.Depth = cur, cur.Depth
	acc.Ancestors = r.ancestors(cur, acc.Ancestors[:0], now)
	acc.Concluded = acc.Concluded[:0]
	if r.conclusions[req.Kind] {
		acc.Concluded = r.concludedEvents(r.conclude(cur, wire.ReasonConclusion, now, nil), acc.Concluded)
		if len(r.retained) > r.cfg.MaxContextsPerPod {
			r.forget(now)
		}
		r.compact()
	}
	commit(acc)
	r.schedule()
	return nil
}

// concludedEvents appends what the events of the contexts in cs need.
func (r *Registry) concludedEvents(cs []*Context, dst []Concluded) []Concluded {
	for _, c := range cs {
		e := Concluded{
			ID: c.ID, Type: c.Type, Parent: c.Parent, Reason: c.Reason, Incarnation: c.Incarnation,
			Depth: c.Depth, Messages: c.Messages, Bytes: c.Bytes, Participants: append([]string{}, c.Senders...),
			Created: c.Created, LastActivity: c.LastActivity, At: c.Concluded,
		}
		e.Tokens, e.TokensFolded, e.TokensSaved = c.Fold()
		if c.Parent != "" {
			e.Ancestors = r.walkAncestors(c, nil, 0, true)
		}
		dst = append(dst, e)
	}
	return dst
}

// ApplyRemote records an envelope that another gateway node accepted, or
// one of the pod's history when the registry is rebuilt from it, so that
// every node builds the same registry from the pod's stream. It refuses
// nothing (the origin decided); a remote envelope takes a token from the
// context's bucket, so that its rate holds approximately across nodes. now
// is when the stream stored it. It returns the contexts it concluded
// (a conclusion-kind envelope), whose events the origin node publishes.
// size and tokens are the envelope's, as Request has them.
func (r *Registry) ApplyRemote(c *envelope.Context, conclusion bool, sender, envelopeID string, size, tokens int, now time.Time) []Concluded {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := now.UnixNano()
	cur := r.activeCtx(c.ID)
	if cur == nil {
		if c.Parent == c.ID || r.inChain(c.Parent, c.ID) {
			return nil // cannot happen when nodes agree; never build a cycle
		}
		cur = r.create(c, strings.Clone(sender), strings.Clone(envelopeID), r.depthOf(c), ns)
	}
	cur.limiter.AllowN(now, 1)
	cur.count(size, tokens, conclusion)
	cur.LastActivity = max(cur.LastActivity, ns)
	if !cur.hasSender(sender) {
		cur.addSender(strings.Clone(sender))
	}
	r.ancestors(cur, nil, ns)
	var out []Concluded
	if conclusion {
		out = r.concludedEvents(r.conclude(cur, wire.ReasonConclusion, ns, nil), nil)
		if len(r.retained) > r.cfg.MaxContextsPerPod {
			r.forget(ns)
		}
		r.compact()
	}
	r.schedule()
	return out
}

// ApplyEvent concludes the active context id for reason, as a
// system/context event in the pod's stream says (another node concluded
// it, or the history the registry is rebuilt from records it); its active
// children conclude with it. When incarnation is not "", only the life of
// the id that the envelope incarnation created concludes: another node's
// event does not end a life this node has just begun. Rebuilding from the
// history, the stream's order is the truth (the event follows the
// envelopes of the life it ends) and incarnation is "".
func (r *Registry) ApplyEvent(id, incarnation, reason string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.activeCtx(id)
	if c == nil || (incarnation != "" && c.Incarnation != incarnation) {
		return
	}
	ns := now.UnixNano()
	r.conclude(c, reason, ns, nil)
	if len(r.retained) > r.cfg.MaxContextsPerPod {
		r.forget(ns)
	}
	r.compact()
	r.schedule()
}

// depthOf computes the depth of a new context (docs/protocol.md section 3). A
// path carries its ancestry; when its parent is registered deeper than the
// path says, the registered depth counts, so that mixing the two forms cannot
// get around the limit.
func (r *Registry) depthOf(c *envelope.Context) int {
	if c.Parent == "" {
		return max(1, c.Segments)
	}
	d := 2 // an unknown parent counts as a root
	if p := r.activeCtx(c.Parent); p != nil {
		d = p.Depth + 1
	}
	if c.Path {
		d = max(d, c.Segments)
	}
	return d
}

// deepest is the depth the deepest registered descendant of id would have
// if id had depth depth (depth itself when it has none). Their chain is at
// most MaxDepth long (every creation checks it), so is the recursion.
func (r *Registry) deepest(id string, depth int) int {
	d := depth
	for _, k := range r.kids[id] {
		d = max(d, r.deepest(k.ID, max(k.floor, depth+1)))
	}
	return d
}

// relink sets the depth of c's registered descendants from c's: contexts
// created before c that name it as their parent are now below it.
func (r *Registry) relink(c *Context) {
	for _, k := range r.kids[c.ID] {
		k.Depth = max(k.floor, c.Depth+1)
		r.relink(k)
	}
}

// inChain reports whether id is among from and its registered ancestors.
// The chain is walked to its end, not only MaxDepth links, as a guard (a
// chain is at most MaxDepth long on the node that accepted its envelopes,
// but another node applies what it is given). The active contexts never
// form a cycle (this check keeps it so), so the walk ends within r.active
// links.
func (r *Registry) inChain(from, id string) bool {
	for i := 0; from != "" && i <= r.active; i++ {
		if from == id {
			return true
		}
		p := r.activeCtx(from)
		if p == nil {
			// The prefixes of an unknown path parent are shorter than
			// any id below them, so they cannot close a cycle.
			return false
		}
		from = p.Parent
	}
	return false
}

func (r *Registry) activeCtx(id string) *Context {
	if c := r.byID[id]; c != nil && c.State == wire.StateActive {
		return c
	}
	return nil
}

// ancestors appends c's ancestor ids, parent first, and keeps the
// registered ones alive: activity in a child is activity in its parents.
func (r *Registry) ancestors(c *Context, dst []string, now int64) []string {
	return r.walkAncestors(c, dst, now, false)
}

// walkAncestors appends c's ancestor ids, parent first. With atConclusion,
// for a concluded c, they are the ancestors an envelope in c had just
// before it concluded: the contexts that concluded with it (a cascade
// concludes the parent before its children's events are written) still
// count, so that a subtree filter admits the event exactly when it would
// admit a conclusion-kind envelope in c (docs/protocol.md section 4).
func (r *Registry) walkAncestors(c *Context, dst []string, now int64, atConclusion bool) []string {
	id := c.Parent
	for i := 0; id != "" && i < r.cfg.MaxDepth; i++ {
		dst = append(dst, id)
		p := r.activeCtx(id)
		if p == nil && atConclusion {
			if q := r.byID[id]; q != nil && q.State == wire.StateConcluded && q.Concluded == c.Concluded {
				p = q // concluded with c, in the same cascade or sweep
			}
		}
		switch {
		case p != nil:
			if now != 0 {
				p.LastActivity = max(p.LastActivity, now)
			}
			id = p.Parent
		case c.Path:
			if j := strings.LastIndexByte(id, '/'); j >= 0 {
				id = id[:j]
			} else {
				id = ""
			}
		default:
			id = ""
		}
	}
	return dst
}

// create registers a new context. creator and incarnation are kept: the
// caller passes strings of its own (not pointing into a message).
func (r *Registry) create(c *envelope.Context, creator, incarnation string, depth int, now int64) *Context {
	n := &Context{
		ID: strings.Clone(c.ID), Type: strings.Clone(c.Type), Parent: strings.Clone(c.Parent),
		Creator: creator, Incarnation: incarnation, Depth: depth, Path: c.Path, State: wire.StateActive,
		Created: now, LastActivity: now, limiter: r.cfg.ContextBucket().NewLimiter(),
		deadline: now + int64(r.cfg.ContextTimeout), index: -1,
	}
	if c.Path && n.Parent == "" {
		if i := strings.LastIndexByte(n.ID, '/'); i >= 0 {
			n.Parent = n.ID[:i]
		}
	}
	switch {
	case c.Path:
		n.floor = max(1, c.Segments)
	case n.Parent != "":
		n.floor = 2 // an unknown parent counts as a root
	default:
		n.floor = 1
	}
	r.byID[n.ID] = n
	r.peakByID = max(r.peakByID, len(r.byID))
	if n.Parent != "" {
		r.kids[n.Parent] = append(r.kids[n.Parent], n)
		r.peakKids = max(r.peakKids, len(r.kids))
	}
	r.relink(n)
	r.active++
	r.byCreator[creator]++
	r.peakCreators = max(r.peakCreators, len(r.byCreator))
	heap.Push(&r.timeouts, n)
	return n
}

// count adds an envelope of size bytes and tokens tokens, of a
// conclusion kind or not, to c's statistics.
func (c *Context) count(size, tokens int, conclusion bool) {
	c.Messages++
	c.Bytes += int64(size)
	c.Tokens += int64(tokens)
	if conclusion {
		c.ConclusionTokens += int64(tokens)
	}
}

// Fold is c's token figures (docs/protocol.md section 3): tokens, what
// its envelopes cost; folded, what folding hides from a late joiner once
// c has concluded (all but its conclusion-kind envelopes, which the
// replay shows, with the system/context event it shows folded or not);
// and saved, folded less what the conclusion-kind envelopes cost: what
// reading the conclusion instead of the branch it ends spares, negative
// when the conclusion costs more than the branch.
func (c *Context) Fold() (tokens, folded, saved int64) {
	folded = c.Tokens - c.ConclusionTokens
	return c.Tokens, folded, folded - c.ConclusionTokens
}

func (c *Context) addSender(id string) {
	if !c.hasSender(id) {
		c.Senders = append(c.Senders, id)
	}
}

func (c *Context) hasSender(id string) bool {
	for _, s := range c.Senders {
		if s == id {
			return true
		}
	}
	return false
}

// conclude ends c and, depth first, its active children.
func (r *Registry) conclude(c *Context, reason string, now int64, out []*Context) []*Context {
	if c.State != wire.StateActive {
		return out
	}
	c.State, c.Reason, c.Concluded = wire.StateConcluded, reason, now
	c.limiter = nil
	r.active--
	if r.byCreator[c.Creator]--; r.byCreator[c.Creator] <= 0 {
		delete(r.byCreator, c.Creator)
	}
	if c.index >= 0 {
		heap.Remove(&r.timeouts, c.index)
	}
	if c.Parent != "" {
		r.removeKid(c.Parent, c)
	}
	r.retained = append(r.retained, c)
	out = append(out, c)
	kids := r.kids[c.ID]
	delete(r.kids, c.ID)
	for _, k := range kids {
		out = r.conclude(k, wire.ReasonParentConcluded, now, out)
	}
	return out
}

func (r *Registry) removeKid(parent string, c *Context) {
	list := r.kids[parent]
	for i, k := range list {
		if k == c {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(r.kids, parent)
	} else {
		r.kids[parent] = list
	}
}

// Expire concludes the contexts idle for the timeout and forgets those
// concluded for longer than the retention. The registry's own timer calls
// it; tests call it with their clock.
func (r *Registry) Expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now.UnixNano())
	r.schedule()
}

func (r *Registry) expire(now int64) {
	var out []*Context
	timeout := int64(r.cfg.ContextTimeout)
	for len(r.timeouts) > 0 && r.timeouts[0].deadline <= now {
		c := r.timeouts[0]
		if due := c.LastActivity + timeout; due > now {
			c.deadline = due // touched since it was scheduled: look again later
			heap.Fix(&r.timeouts, 0)
			continue
		}
		out = r.conclude(c, wire.ReasonTimeout, now, out)
	}
	if len(out) > 0 && r.onExpire != nil {
		r.onExpire(r.concludedEvents(out, nil))
	}
	r.forget(now)
	r.compact()
}

// forget drops the retained contexts past the retention, and the oldest
// ones beyond MaxContextsPerPod, so memory stays bounded.
func (r *Registry) forget(now int64) {
	retention := int64(r.cfg.ContextRetention)
	n := 0
	for n < len(r.retained) {
		c := r.retained[n]
		if c.Concluded+retention > now && len(r.retained)-n <= r.cfg.MaxContextsPerPod {
			break
		}
		if r.byID[c.ID] == c {
			delete(r.byID, c.ID)
		}
		r.retained[n] = nil
		n++
	}
	if n > 0 {
		r.retained = r.retained[n:]
		switch {
		case len(r.retained) == 0:
			r.retained = nil
		case cap(r.retained) >= compactBelow && len(r.retained) <= cap(r.retained)/4:
			// Slicing off the front never frees the array's start.
			r.retained = append(make([]*Context, 0, 2*len(r.retained)), r.retained...)
		}
	}
}

// compactBelow is the size under which a map or slice is not worth
// rebuilding.
const compactBelow = 64

// compact gives back the room of maps and of the timeout heap that have
// emptied out: each is copied once it holds a quarter of its peak, so the
// copies cost O(1) for each entry that left, and the registry's memory
// follows the contexts it holds rather than the most it ever held.
func (r *Registry) compact() {
	r.byID = shrinkMap(r.byID, &r.peakByID)
	r.kids = shrinkMap(r.kids, &r.peakKids)
	r.byCreator = shrinkMap(r.byCreator, &r.peakCreators)
	if h := r.timeouts; cap(h) >= compactBelow && len(h) <= cap(h)/4 {
		// Positions do not change, so the contexts' heap indexes hold.
		r.timeouts = append(make(timeoutHeap, 0, 2*len(h)), h...)
	}
}

func shrinkMap[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if *peak < compactBelow || len(m) > *peak/4 {
		return m
	}
	n := make(map[K]V, len(m))
	for k, v := range m {
		n[k] = v
	}
	*peak = len(n)
	return n
}

func (r *Registry) fire() {
	r.mu.Lock()
	r.timerAt = 0
	if r.closed || r.paused {
		r.mu.Unlock()
		return
	}
	if due := r.cfg.OnDue; due != nil {
		// The owner expires under its own lock, which comes before ours.
		r.mu.Unlock()
		due()
		return
	}
	defer r.mu.Unlock()
	r.expire(r.cfg.Now().UnixNano())
	r.schedule()
}

// schedule sets the timer for the next deadline or retention expiry.
func (r *Registry) schedule() {
	if r.closed || r.paused {
		return
	}
	var next int64
	if len(r.timeouts) > 0 {
		next = r.timeouts[0].deadline
	}
	if len(r.retained) > 0 {
		if at := r.retained[0].Concluded + int64(r.cfg.ContextRetention); next == 0 || at < next {
			next = at
		}
	}
	if next == 0 || (r.timerAt != 0 && r.timerAt <= next) {
		return
	}
	r.timerAt = next
	d := time.Duration(next - r.cfg.Now().UnixNano())
	if d < time.Millisecond {
		d = time.Millisecond
	}
	r.timer.Reset(d)
}

// Pause stops (true) or restarts (false) the registry's timer: while the
// registry is rebuilt from the pod's history, nothing may conclude before
// the history's later envelopes have been applied.
func (r *Registry) Pause(paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = paused
	if paused {
		r.timer.Stop()
		r.timerAt = 0
		return
	}
	r.schedule()
}

// Close stops the registry's timer.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.timer.Stop()
}

// Empty reports whether the registry holds no context, active or retained.
func (r *Registry) Empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID) == 0
}

// Counts returns the number of active and retained contexts.
func (r *Registry) Counts() (active, retained int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active, len(r.retained)
}

// Query selects contexts for gateway/contexts.
type Query struct {
	State string // wire.StateActive, wire.StateConcluded or wire.StateAll
	ID    string
	Type  string
	Limit int
}

// Query answers q, oldest first. Concluded contexts are listed until the
// retention passes, also those whose id an envelope has since reopened:
// the new context does not hide the concluded one (docs/protocol.md section 3).
func (r *Registry) Query(q Query) []wire.ContextInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sel []*Context
	match := func(c *Context) bool {
		return (q.ID == "" || c.ID == q.ID) && (q.Type == "" || c.Type == q.Type)
	}
	if q.State != wire.StateActive {
		for _, c := range r.retained { // concluded, oldest first
			if match(c) {
				sel = append(sel, c)
			}
		}
	}
	if q.State != wire.StateConcluded {
		if q.ID != "" {
			if c := r.activeCtx(q.ID); c != nil && match(c) {
				sel = append(sel, c)
			}
		} else {
			for _, c := range r.timeouts { // every active context, once
				if match(c) {
					sel = append(sel, c)
				}
			}
		}
	}
	// Stable: incarnations of one id created at the same instant stay in
	// the order they lived.
	sort.SliceStable(sel, func(i, j int) bool {
		if sel[i].Created != sel[j].Created {
			return sel[i].Created < sel[j].Created
		}
		return sel[i].ID < sel[j].ID
	})
	if q.Limit > 0 && len(sel) > q.Limit {
		sel = sel[:q.Limit]
	}
	if sel == nil {
		return nil
	}
	out := make([]wire.ContextInfo, len(sel))
	for i, c := range sel {
		out[i] = c.Info()
	}
	return out
}

// Info describes c as gateway/contexts does; call it with the registry
// locked (inside commit or onExpire) or through Query.
func (c *Context) Info() wire.ContextInfo {
	i := wire.ContextInfo{
		ID: c.ID, Depth: c.Depth, State: c.State, Creator: c.Creator,
		Messages: c.Messages, Bytes: c.Bytes, Participants: append([]string{}, c.Senders...),
		Created: FormatTime(c.Created), LastActivity: FormatTime(c.LastActivity), Tokens: c.Tokens,
	}
	if c.Type != "" {
		i.Type = &c.Type
	}
	if c.Parent != "" {
		i.Parent = &c.Parent
	}
	if c.State == wire.StateConcluded {
		reason, at := c.Reason, FormatTime(c.Concluded)
		i.Reason, i.Concluded = &reason, &at
		_, folded, saved := c.Fold()
		i.TokensFolded, i.TokensSaved = &folded, &saved
	}
	return i
}

// FormatTime writes unix nanoseconds as the gateway's timestamps.
func FormatTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format(wire.TimeFormat)
}

// timeoutHeap orders active contexts by the time the registry next checks
// them. A context's activity only moves its LastActivity; the heap is fixed
// when the old deadline comes, so an envelope in an existing context costs
// O(1).
type timeoutHeap []*Context

func (h timeoutHeap) Len() int           { return len(h) }
func (h timeoutHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h timeoutHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timeoutHeap) Push(x any) {
	c := x.(*Context)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *timeoutHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*h = old[:len(old)-1]
	return c
}
