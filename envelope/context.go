package envelope

import (
	"strings"

	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/wire"
)

// Limits on the context field that docs/protocol.md section 3 fixes.
const (
	MaxContextIDBytes   = 256
	MaxContextTypeBytes = 64
)

// Context is a parsed context field. Its strings may point into the message.
type Context struct {
	ID     string
	Type   string // "" when the envelope does not name one
	Parent string // "" for a root, or when the envelope does not name one
	// Path is set for the ADR-p4m string form, which names its parent
	// implicitly and whose depth is its number of segments.
	Path     bool
	Segments int
}

// ParseContext checks the syntax of a context field (docs/protocol.md section
// 3): either {"id", "type"?, "parent"?, "metadata"?} or a "root/child/leaf"
// path. The registry decides the rest (conflicts, depth, cycles).
func ParseContext(raw []byte, maxBytes int) (Context, *Error) {
	var c Context
	if len(raw) > maxBytes {
		return c, Errorf(wire.CodeInvalidContext, "the context field is %d bytes, over the limit of %d", len(raw), maxBytes)
	}
	v := gjson.Parse(bytesString(raw))
	switch {
	case v.Type == gjson.String:
		return parsePath(v.Str)
	case v.IsObject():
		return parseObject(v)
	}
	return c, Errorf(wire.CodeInvalidContext, "context must be an object or a path string")
}

func parsePath(p string) (Context, *Error) {
	c := Context{ID: p, Path: true}
	if len(p) == 0 || len(p) > MaxContextIDBytes {
		return c, Errorf(wire.CodeInvalidContext, "a context path must be 1 to %d bytes", MaxContextIDBytes)
	}
	segStart := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i == segStart {
				return c, Errorf(wire.CodeInvalidContext, "a context path has an empty segment")
			}
			c.Segments++
			segStart = i + 1
			continue
		}
		ch := p[i]
		if !(isAlnum(ch) || ch == '_' || ch == '-') {
			return c, Errorf(wire.CodeInvalidContext, "a context path's segments are made of [A-Za-z0-9_-]")
		}
	}
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		c.Parent = p[:i]
	}
	return c, nil
}

func parseObject(v gjson.Result) (Context, *Error) {
	var (
		c            Context
		bad          *Error
		seen         uint8
		hasID        bool
		fieldMessage = func(name string, max int) *Error {
			return Errorf(wire.CodeInvalidContext, "context.%s must be a string of 1 to %d bytes without control characters", name, max)
		}
	)
	v.ForEach(func(k, f gjson.Result) bool {
		var bit uint8
		switch k.Str {
		case "id":
			bit = 1
		case "type":
			bit = 2
		case "parent":
			bit = 4
		case "metadata":
			bit = 8
		default:
			bad = Errorf(wire.CodeInvalidContext, "context has an unknown field %q (allowed: id, type, parent, metadata)", k.Str)
			return false
		}
		if seen&bit != 0 {
			bad = Errorf(wire.CodeInvalidContext, "context.%s appears twice", k.Str)
			return false
		}
		seen |= bit
		switch k.Str {
		case "id":
			if !validName(f, MaxContextIDBytes) {
				bad = fieldMessage("id", MaxContextIDBytes)
				return false
			}
			c.ID, hasID = f.Str, true
		case "type":
			if !validName(f, MaxContextTypeBytes) {
				bad = fieldMessage("type", MaxContextTypeBytes)
				return false
			}
			c.Type = f.Str
		case "parent":
			if !validName(f, MaxContextIDBytes) {
				bad = fieldMessage("parent", MaxContextIDBytes)
				return false
			}
			c.Parent = f.Str
		case "metadata":
			if !f.IsObject() {
				bad = Errorf(wire.CodeInvalidContext, "context.metadata must be an object")
				return false
			}
		}
		return true
	})
	if bad != nil {
		return c, bad
	}
	if !hasID {
		return c, Errorf(wire.CodeInvalidContext, "context.id is required")
	}
	return c, nil
}

func validName(f gjson.Result, max int) bool {
	return f.Type == gjson.String && len(f.Str) > 0 && len(f.Str) <= max && !hasControl(f.Str)
}
