package participant

import "strings"

// Capabilities are the kind patterns a participant may send (docs/protocol.md
// section 2).
type Capabilities []string

// Match reports whether kind matches one pattern: "*" matches everything, a
// pattern ending in "*" matches the kinds that start with what precedes it,
// any other pattern matches exactly. Token pod lists use the same patterns.
func Match(pattern, kind string) bool {
	if n := len(pattern); n > 0 && pattern[n-1] == '*' {
		return strings.HasPrefix(kind, pattern[:n-1])
	}
	return pattern == kind
}

// Allows reports whether a participant with these capabilities may send an
// envelope of this kind. No capability grants the gateway's system/* kinds.
func (c Capabilities) Allows(kind string) bool {
	if strings.HasPrefix(kind, "system/") {
		return false
	}
	for _, p := range c {
		if Match(p, kind) {
			return true
		}
	}
	return false
}

// MatchAny reports whether name matches one of the patterns.
func MatchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}
