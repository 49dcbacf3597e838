// What the signed-in token may do, as far as the page can tell from its
// welcome's you.capabilities (docs/protocol.md section 2). The page only
// asks whether some capability's kind pattern could allow a kind: where a
// payload pattern decides (which tools a token may call, and so which
// proposals it may approve), the gateway decides, and the page shows its
// answer (a refusal is a system/error). So a control shows when the
// gateway could accept what it sends, never when it could not.

// kindMatches is the gateway's kind rule (capability.MatchKind): "*"
// matches every kind, a pattern ending in "*" the kinds that start with
// what precedes it, any other pattern itself alone. No capability allows
// the gateway's own system/* kinds.
export function kindMatches(pattern, kind) {
  if (typeof pattern !== 'string' || pattern === '' || kind.startsWith('system/')) return false;
  if (pattern.endsWith('*')) return kind.startsWith(pattern.slice(0, -1));
  return pattern === kind;
}

// patternOf is a capability's kind pattern: the string itself, or the
// kind of a {kind, payload} object.
function patternOf(c) {
  if (typeof c === 'string') return c;
  if (c && typeof c === 'object' && typeof c.kind === 'string') return c.kind;
  return null;
}

// mayKind tells whether a capability in caps could allow an envelope of
// kind (its payload aside).
export function mayKind(caps, kind) {
  return Array.isArray(caps) && caps.some((c) => kindMatches(patternOf(c), kind));
}

// capsText shows a capability list in a sentence.
export function capsText(caps) {
  if (!Array.isArray(caps) || caps.length === 0) return 'none';
  return caps.map((c) => (typeof c === 'string' ? c : JSON.stringify(c))).join(', ');
}
