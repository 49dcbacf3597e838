// Package capability decides what a participant may send: it compiles
// capability lists (docs/protocol.md section 2) into a Set that the gateway
// checks for every envelope, and holds the grants that participants give
// each other at run time (capability/grant and capability/revoke, from
// MEW). It is read in the order the gateway meets it.
//
// # 1. Capabilities
//
// A capability (wire.Capability) is a kind pattern, and optionally a
// payload pattern that the envelope's payload must match as well:
//
//	"chat"                                     kind chat, any payload
//	"mcp/*"                                    every kind that starts with mcp/
//	"*"                                        every kind
//	{"kind": "mcp/request", "payload": {"method": "tools/call", "params": {"name": "read_*"}}}
//
// No capability grants the gateway's own system/* kinds.
//
// Compile checks a list once, when a participant joins or a grant
// arrives, and refuses what it cannot check with a *PatternError that
// names the capability and the place in its pattern: an empty kind, a
// pattern past the bounds (MaxPatternBytes, MaxPatternDepth, …), a form
// of MEW's it does not implement (ErrUnsupported). It never accepts a
// pattern it would read differently from MEW.
//
// # 2. The check
//
// Set.Allows(kind, payload) runs for every envelope, so its cost is
// arranged around the common case. The plain kind patterns come first, in
// a loop like the kind-only check that preceded this package: no
// allocation, the payload not looked at (BenchmarkAllows shows the two cost the same).
// Only when none allows the kind are the payload patterns whose kind
// pattern matches looked at, and only then is the payload read, with gjson,
// in place, field by field: it is never decoded whole.
//
// Whatever the patterns and the payload, a check is bounded: the bounds
// on patterns fix what one pattern may ask, and a work budget (WorkBase
// plus WorkPerPayloadByte per byte of payload, in bytes scanned and steps
// taken) stops a check that would cost more, and that check allows
// nothing. No input recurses as deep as the payload nests.
//
// # 3. Payload patterns
//
// They match as MEW's matcher (mew-protocol, src/capability-matcher) does:
//
//   - An object pattern matches an object that has every key it names,
//     each with a value its pattern matches; other keys do not count. A
//     key it names must be there: {"method": "!tools/call"} does not match
//     a payload without "method". The pattern {} matches any payload.
//   - A payload that is not an object, or no payload, is matched as {}.
//   - A key with * or ? is a glob over the object's keys: one key it
//     matches whose value matches is enough. The key "**" matches when a
//     string, number, boolean or null anywhere below the object (keys not
//     counted) matches its pattern.
//   - A list is a choice: it matches a value one of its patterns matches.
//     It does not match a list, and [] matches nothing.
//   - A number, true, false or null matches an equal value; numbers
//     compare as float64, as JavaScript compares them (1 matches 1.0).
//   - A string matches an equal string, whatever it holds, and
//     otherwise: "/…/" is a regular expression (RE2) found anywhere in
//     the string unless anchored; "!" before a glob or string matches a
//     string that does not match it; a string with * or ? is a glob (see
//     below); any other string matches only itself. A string pattern
//     matches strings alone: "*" does not match 5.
//
// Globs follow micromatch, which MEW uses: * is any run of characters
// but "/", ? one character but "/", a whole segment ** any number of
// segments ("/public/**" matches "/public/a/b" and "/public"), and no
// wildcard matches the "." that begins a segment ("*" does not match
// ".env"). \ makes * ? \ [ ] { } ( ) literal.
//
// Where this package differs from MEW, it matches less, and says so at
// Compile rather than reading a pattern another way:
//
//   - JSONPath keys ("$.params.name"), micromatch's brackets, braces and
//     extglobs, negated key globs, "!!", and objects under "**" are
//     refused (ErrUnsupported); regular expressions outside RE2
//     (lookaround, backreferences) are refused (ErrSyntax).
//   - A payload that repeats a key the pattern names matches only if
//     every copy does: JSON leaves to each receiver which copy counts.
//     The gateway refuses such payloads before any pattern sees them
//     (section 5 below).
//   - A lone "/" is a literal, not an empty regular expression that
//     matches everything; micromatch's allowance for a trailing "/" in
//     the value ("a/*" matching "a/b/") is not made.
//
// # 4. Grants
//
// A participant that holds capability/grant may give another
// capabilities at run time. Grants holds those of one participant in one
// pod, and PodGrants those of a pod, by recipient. A Grant carries the
// grant envelope's id, which names it from then on, its grantor, its
// compiled capabilities and, optionally, a context it is scoped to and a
// recipient it is scoped to.
//
//	pod.For("bob").Add(capability.Grant{ID: env.ID, Grantor: "alice", Context: "task-1", Capabilities: set})
//	…
//	ok := base.Allows(kind, payload) || grants.Allows(kind, payload, capability.Where{Context: contextID, Ancestors: ancestors, To: to})
//
// An unscoped grant holds for every envelope; a scoped one for the
// envelopes in its context or below it (contextID or one of its ancestors
// is the scope), and it ends when its context concludes: the gateway calls
// PodGrants.EndContext for each context that concludes and tells each
// recipient of the grants it returns. A grant scoped to a recipient (To)
// holds only for envelopes addressed to that participant alone, so that
// approving one server's tool "always" grants nothing on another server. Revoke ends a grant by id,
// RevokeCapabilities takes capabilities away from the grants of one
// grantor; only a grant's grantor may revoke it.
//
// Grants.Allows reads the grants without a lock (copy-on-write behind an
// atomic pointer), so a change is in force from the next envelope checked
// after it returns. The operations are deterministic: applied in the
// order of the pod's log, they leave every node of a cluster with the
// same grants.
//
// Delegation never amplifies (delegation.go): a grantor gives only what
// it holds where the grant applies. Set.Covers decides, conservatively,
// whether one capability list holds another's capability;
// Grants.Allowing and Grants.Covering say which grant a grantor holds
// something through, which the new grant records in Via; and
// PodGrants.EndThrough ends, down the chain, the grants made through
// grants that ended.
//
// # 5. One reading of a payload
//
// A pattern matches keys exactly; Go's encoding/json matches them
// ignoring case and takes the last. Ambiguous finds, in one pass that
// never recurses, an object with two keys equal ignoring case at any
// depth, which the gateway refuses wherever it reads a payload, so that
// what a pattern matched is what every receiver reads (FuzzOneReading
// holds the two readings together).
package capability
