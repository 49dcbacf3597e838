package filter

import (
	"encoding/json"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// MaxEntries bounds each list of a filter, so that a filter's memory is
// bounded whatever a participant asks for.
const MaxEntries = 1024

// Filter is one participant's choice of envelopes (docs/protocol.md
// section 4). Its exported fields are its settings; its JSON form (the
// welcome's "filter", the system/filter answer) is Wire's. A Filter is
// immutable once built: an update builds a new one, so the fan-out reads it
// without a lock.
type Filter struct {
	Main         bool
	Contexts     string // wire.ContextsAll or wire.ContextsNone
	Types        []string
	ExcludeTypes []string
	IDs          []string
	Subtree      bool
	Conclusions  bool
	Routing      string // wire.RoutingAll or wire.RoutingDirected
	Echo         bool
	Batch        bool

	types, excludeTypes, ids set
	contextsAll, directed    bool
}

type set map[string]struct{}

func newSet(list []string) set {
	if len(list) == 0 {
		return nil
	}
	s := make(set, len(list))
	for _, v := range list {
		s[v] = struct{}{}
	}
	return s
}

func (s set) has(v string) bool {
	_, ok := s[v]
	return ok
}

// Wire is the filter in its JSON form, every field set (the effective
// filter): false booleans and empty lists are written too.
func (f *Filter) Wire() wire.Filter {
	list := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	return wire.Filter{
		Main: wire.Bool(f.Main), Contexts: f.Contexts,
		Types: list(f.Types), ExcludeTypes: list(f.ExcludeTypes), IDs: list(f.IDs),
		Subtree: wire.Bool(f.Subtree), Conclusions: wire.Bool(f.Conclusions),
		Routing: f.Routing, Echo: wire.Bool(f.Echo), Batch: wire.Bool(f.Batch),
	}
}

// MarshalJSON writes Wire's JSON.
func (f *Filter) MarshalJSON() ([]byte, error) { return json.Marshal(f.Wire()) }

// Default returns the filter that admits everything.
func Default() *Filter {
	f := &Filter{Main: true, Contexts: wire.ContextsAll, Routing: wire.RoutingAll}
	f.compile()
	return f
}

func (f *Filter) compile() {
	if f.Types == nil {
		f.Types = []string{}
	}
	if f.ExcludeTypes == nil {
		f.ExcludeTypes = []string{}
	}
	if f.IDs == nil {
		f.IDs = []string{}
	}
	f.types, f.excludeTypes, f.ids = newSet(f.Types), newSet(f.ExcludeTypes), newSet(f.IDs)
	f.contextsAll = f.Contexts == wire.ContextsAll
	f.directed = f.Routing == wire.RoutingDirected
}

// Admits decides whether the participant self receives the envelope or
// context event described by m (docs/protocol.md section 4). Presence is not
// its concern: the pod delivers presence to everyone but its subject.
func (f *Filter) Admits(m *envelope.Meta, self string) bool {
	return f.admits(m, self, f.Echo)
}

// AdmitsPast decides for an entry of the pod's history (a joiner's
// replay, gateway/history): as Admits, except that the participant's own
// envelopes are admitted as anyone's, whatever its echo, since a returning
// agent needs what it said (docs/protocol.md section 8).
func (f *Filter) AdmitsPast(m *envelope.Meta, self string) bool {
	return f.admits(m, self, true)
}

func (f *Filter) admits(m *envelope.Meta, self string, echo bool) bool {
	if len(m.To) > 0 {
		for _, to := range m.To {
			if to == self {
				// Addressed envelopes pass every filter, echo included.
				return true
			}
		}
		if f.directed {
			return false
		}
	}
	if m.From == self && !echo {
		return false
	}
	if m.ContextID == "" {
		return f.Main
	}
	if f.excludeTypes != nil && f.excludeTypes.has(m.ContextType) {
		return false
	}
	if f.contextsAll {
		return true
	}
	if f.types != nil && f.types.has(m.ContextType) {
		return true
	}
	if f.ids != nil {
		if f.ids.has(m.ContextID) {
			return true
		}
		if f.Subtree {
			for _, a := range m.Ancestors {
				if f.ids.has(a) {
					return true
				}
			}
		}
	}
	return f.Conclusions && m.Conclusion()
}
