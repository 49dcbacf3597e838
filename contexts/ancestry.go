package contexts

import "github.com/mcpp/gateway/envelope"

// Ancestry appends to dst the ancestor ids, parent first, that an
// envelope in c would have were it accepted now: a registered active
// context's own, or a new one's from the parent it names. It changes
// nothing (no context is touched): the gateway asks it before Accept,
// to tell whether a grant scoped to a context holds for the envelope.
func (r *Registry) Ancestry(c *envelope.Context, dst []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.activeCtx(c.ID); cur != nil {
		return r.walkAncestors(cur, dst, 0, false)
	}
	return r.walkAncestors(&Context{ID: c.ID, Parent: c.Parent, Path: c.Path}, dst, 0, false)
}

// Active reports whether id names an open (active) context.
func (r *Registry) Active(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.activeCtx(id) != nil
}
