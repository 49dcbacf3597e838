package capability_test

import "strings"

// The capability check the gateway ran before issue 23
// (participant.Capabilities), kept here as the reference that plain kind
// patterns must agree with, and as the baseline of BenchmarkAllows.

// referenceMatch reports whether kind matches pattern: "*" everything, a
// pattern ending in "*" the kinds that start with what precedes it, any
// other exactly.
func referenceMatch(pattern, kind string) bool {
	if n := len(pattern); n > 0 && pattern[n-1] == '*' {
		return strings.HasPrefix(kind, pattern[:n-1])
	}
	return pattern == kind
}

// referenceCaps are kind patterns, as participants held them.
type referenceCaps []string

// Allows reports whether one pattern matches kind; nothing grants system/*.
func (c referenceCaps) Allows(kind string) bool {
	if strings.HasPrefix(kind, "system/") {
		return false
	}
	for _, p := range c {
		if referenceMatch(p, kind) {
			return true
		}
	}
	return false
}
