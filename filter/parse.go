package filter

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// Error is an invalid filter; the gateway answers it with invalid_filter.
type Error struct{ Message string }

func (e *Error) Error() string { return "invalid_filter: " + e.Message }

func errorf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...)}
}

// QueryParams are the query parameters a filter reads at the upgrade.
var QueryParams = []string{"main", "contexts", "types", "exclude_types", "ids", "subtree", "conclusions", "routing", "echo", "batch"}

// FromQuery builds a filter from the upgrade's query (docs/protocol.md
// section 4). Parameters that are absent keep their defaults; other
// parameters (pod, token, …) are not its business.
func FromQuery(q url.Values) (*Filter, error) {
	if !hasFilterParams(q) {
		// Filters are immutable, so every participant that asks for
		// nothing shares one.
		return sharedDefault, nil
	}
	f := Default()
	var p patch
	for _, name := range QueryParams {
		vals, ok := q[name]
		if !ok {
			continue
		}
		if len(vals) != 1 {
			return nil, errorf("%s is given %d times", name, len(vals))
		}
		v := vals[0]
		var err error
		switch name {
		case "main":
			p.Main, err = parseBool(name, v)
		case "subtree":
			p.Subtree, err = parseBool(name, v)
		case "conclusions":
			p.Conclusions, err = parseBool(name, v)
		case "echo":
			p.Echo, err = parseBool(name, v)
		case "batch":
			p.Batch, err = parseBool(name, v)
		case "contexts":
			p.Contexts = &v
		case "routing":
			p.Routing = &v
		case "types":
			p.Types = splitList(v)
		case "exclude_types":
			p.ExcludeTypes = splitList(v)
		case "ids":
			p.IDs = splitList(v)
		}
		if err != nil {
			return nil, err
		}
	}
	return f.apply(&p)
}

// Update returns the filter that a gateway/filter payload asks for: the
// fields it names replace f's, the others keep their value. The payload is
// read strictly: one JSON object whose keys are exactly the field names of
// docs/protocol.md section 4 (encoding/json alone would take "Main" for
// "main"), each at most once and none null (leave a field out to keep its
// value).
func (f *Filter) Update(payload []byte) (*Filter, error) {
	if !json.Valid(payload) {
		return nil, errorf("the filter is not one JSON object")
	}
	v := gjson.ParseBytes(payload)
	if !v.IsObject() {
		return nil, errorf("the filter must be a JSON object of the fields of docs/protocol.md section 4")
	}
	var (
		p    patch
		err  *Error
		seen uint16
	)
	v.ForEach(func(k, val gjson.Result) bool {
		i := fieldIndex(k.Str)
		if i < 0 {
			err = errorf("unknown filter field %q (known: %s)", k.Str, strings.Join(QueryParams, ", "))
			return false
		}
		if seen&(1<<i) != 0 {
			err = errorf("filter field %q appears twice", k.Str)
			return false
		}
		seen |= 1 << i
		if val.Type == gjson.Null {
			err = errorf("%s is null; leave it out to keep its value", k.Str)
			return false
		}
		if e := json.Unmarshal([]byte(val.Raw), p.field(i)); e != nil {
			err = errorf("%s: %s", k.Str, typeMessage(k.Str))
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return f.apply(&p)
}

func fieldIndex(name string) int {
	for i, n := range QueryParams {
		if n == name {
			return i
		}
	}
	return -1
}

// field is where the value of QueryParams[i] is decoded.
func (p *patch) field(i int) any {
	switch QueryParams[i] {
	case "main":
		return &p.Main
	case "contexts":
		return &p.Contexts
	case "types":
		return &p.Types
	case "exclude_types":
		return &p.ExcludeTypes
	case "ids":
		return &p.IDs
	case "subtree":
		return &p.Subtree
	case "conclusions":
		return &p.Conclusions
	case "routing":
		return &p.Routing
	case "echo":
		return &p.Echo
	case "batch":
		return &p.Batch
	}
	panic("filter: no field " + QueryParams[i])
}

func typeMessage(name string) string {
	switch name {
	case "contexts", "routing":
		return "must be a string"
	case "types", "exclude_types", "ids":
		return "must be an array of strings"
	}
	return "must be true or false"
}

var sharedDefault = Default()

func hasFilterParams(q url.Values) bool {
	for _, name := range QueryParams {
		if _, ok := q[name]; ok {
			return true
		}
	}
	return false
}

// patch is a partial filter: nil fields are absent.
type patch struct {
	Main         *bool
	Contexts     *string
	Types        *[]string
	ExcludeTypes *[]string
	IDs          *[]string
	Subtree      *bool
	Conclusions  *bool
	Routing      *string
	Echo         *bool
	Batch        *bool
}

func (f *Filter) apply(p *patch) (*Filter, error) {
	n := *f
	setBool := func(dst *bool, src *bool) {
		if src != nil {
			*dst = *src
		}
	}
	setBool(&n.Main, p.Main)
	setBool(&n.Subtree, p.Subtree)
	setBool(&n.Conclusions, p.Conclusions)
	setBool(&n.Echo, p.Echo)
	setBool(&n.Batch, p.Batch)
	if p.Contexts != nil {
		if *p.Contexts != wire.ContextsAll && *p.Contexts != wire.ContextsNone {
			return nil, errorf("contexts must be %q or %q, not %q", wire.ContextsAll, wire.ContextsNone, *p.Contexts)
		}
		n.Contexts = *p.Contexts
	}
	if p.Routing != nil {
		if *p.Routing != wire.RoutingAll && *p.Routing != wire.RoutingDirected {
			return nil, errorf("routing must be %q or %q, not %q", wire.RoutingAll, wire.RoutingDirected, *p.Routing)
		}
		n.Routing = *p.Routing
	}
	lists := []struct {
		name string
		src  *[]string
		dst  *[]string
		max  int
	}{
		{"types", p.Types, &n.Types, envelope.MaxContextTypeBytes},
		{"exclude_types", p.ExcludeTypes, &n.ExcludeTypes, envelope.MaxContextTypeBytes},
		{"ids", p.IDs, &n.IDs, envelope.MaxContextIDBytes},
	}
	for _, l := range lists {
		if l.src == nil {
			continue
		}
		if len(*l.src) > MaxEntries {
			return nil, errorf("%s has %d entries, over the limit of %d", l.name, len(*l.src), MaxEntries)
		}
		for _, v := range *l.src {
			if len(v) == 0 || len(v) > l.max || strings.ContainsFunc(v, isControl) || !utf8.ValidString(v) {
				return nil, errorf("%s entries must be 1 to %d bytes of UTF-8 without control characters", l.name, l.max)
			}
		}
		*l.dst = append([]string{}, *l.src...)
	}
	n.compile()
	return &n, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func parseBool(name, v string) (*bool, error) {
	var b bool
	switch v {
	case "1", "true":
		b = true
	case "0", "false":
	default:
		return nil, errorf("%s must be 0 or 1, not %q", name, v)
	}
	return &b, nil
}

func splitList(v string) *[]string {
	out := []string{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return &out
}
