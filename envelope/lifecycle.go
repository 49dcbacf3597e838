package envelope

import "github.com/tidwall/gjson"

// Mode says how a pod's history keeps an envelope (docs/protocol.md section 8).
type Mode uint8

// The lifecycle modes. The zero value is durable: an envelope without a
// lifecycle field is kept and replayed whole.
const (
	ModeDurable   Mode = 0
	ModeTransient Mode = 1 // kept whole until consumed, then replayed collapsed to its summary
	ModeEphemeral Mode = 2 // delivered live, never stored
)

// Limits of the lifecycle field that docs/protocol.md section 8 fixes.
const (
	MaxSummaryBytes = 1024
	MaxConsumes     = 64
)

// parseLifecycle checks the lifecycle object and records its mode and the
// ids it consumes (strings pointing into the message). The summary is read
// again from the stored envelope when history collapses it, so it is only
// checked here.
func (e *Envelope) parseLifecycle(v gjson.Result) string {
	if !v.IsObject() {
		return "lifecycle must be an object"
	}
	var (
		bad        string
		seen       uint8
		mode       string
		hasMode    bool
		hasSummary bool
	)
	v.ForEach(func(k, f gjson.Result) bool {
		var bit uint8
		switch k.Str {
		case "mode":
			bit = 1
		case "summary":
			bit = 2
		case "consumes":
			bit = 4
		default:
			bad = "lifecycle has an unknown field " + quote(k.Str) + " (allowed: mode, summary, consumes)"
			return false
		}
		if seen&bit != 0 {
			bad = "lifecycle." + k.Str + " appears twice"
			return false
		}
		seen |= bit
		switch k.Str {
		case "mode":
			if f.Type != gjson.String {
				bad = `lifecycle.mode must be "durable", "transient" or "ephemeral"`
				return false
			}
			mode, hasMode = f.Str, true
		case "summary":
			if f.Type != gjson.String || len(f.Str) == 0 || len(f.Str) > MaxSummaryBytes {
				bad = "lifecycle.summary must be a string of 1 to 1024 bytes"
				return false
			}
			hasSummary = true
		case "consumes":
			n := 0
			ok := f.IsArray()
			f.ForEach(func(_, id gjson.Result) bool {
				n++
				ok = ok && id.Type == gjson.String && len(id.Str) > 0 && len(id.Str) <= MaxIDBytes
				if ok {
					e.Consumes = append(e.Consumes, id.Str)
				}
				return ok
			})
			if !ok || n < 1 || n > MaxConsumes {
				bad = "lifecycle.consumes must be an array of 1 to 64 envelope ids"
				return false
			}
		}
		return true
	})
	if bad != "" {
		return bad
	}
	switch {
	case !hasMode || mode == "durable":
		e.Mode = ModeDurable
	case mode == "transient":
		e.Mode = ModeTransient
	case mode == "ephemeral":
		e.Mode = ModeEphemeral
	default:
		return `lifecycle.mode must be "durable", "transient" or "ephemeral"`
	}
	if e.Mode == ModeTransient && !hasSummary {
		return "a transient envelope needs lifecycle.summary, what history keeps of it once consumed"
	}
	if e.Mode != ModeTransient && hasSummary {
		return "lifecycle.summary comes with mode transient only"
	}
	return ""
}

// quote writes s as a JSON string for an error message, short.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = append(b, '?')
		default:
			b = append(b, string(r)...)
		}
	}
	return string(append(b, '"'))
}
