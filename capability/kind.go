package capability

import "strings"

// MatchKind reports whether kind matches one kind pattern: "*" matches
// every kind, a pattern ending in "*" the kinds that start with what
// precedes it, any other pattern exactly. It is the rule the gateway had
// before payload patterns (TestMatchKindAgrees), and the rule of a token's
// pod patterns too, written for the loop of Set.Allows: the lengths
// and first bytes, compared inline, turn most patterns down without the
// call that a string comparison costs, so that the loop stays as cheap as
// the kind-only check that preceded it (referenceMatch in the tests) though
// Set.Allows has a payload to keep.
func MatchKind(pattern, kind string) bool {
	n := len(pattern)
	if n > 0 && pattern[n-1] == '*' {
		n--
		return n == 0 || len(kind) >= n && kind[0] == pattern[0] && kind[:n] == pattern[:n]
	}
	return len(kind) == n && (n == 0 || kind[0] == pattern[0]) && kind == pattern
}

// KindCovers reports whether every kind that pattern c matches, pattern r
// matches too. A revocation that names r takes c away (Grants.RevokeCapabilities).
func KindCovers(r, c string) bool {
	rn := len(r)
	if rn == 0 || r[rn-1] != '*' {
		return r == c // an exact pattern covers itself alone
	}
	// r is a prefix pattern: c is covered when everything c matches starts
	// with r's prefix, which is c itself for an exact c and c's own prefix
	// for a prefix c.
	if cn := len(c); cn > 0 && c[cn-1] == '*' {
		c = c[:cn-1]
	}
	return strings.HasPrefix(c, r[:rn-1])
}

// reserved reports whether kind is the gateway's own (system/*), which no
// capability grants.
func reserved(kind string) bool {
	return strings.HasPrefix(kind, "system/")
}
