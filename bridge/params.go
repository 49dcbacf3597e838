package bridge

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Two params hold a requester's own ids, which the bridge replaces with
// its own on the way to the server and puts back on the way to the
// requester, as it does the request's id:
//
//   - params._meta.progressToken of a request: the server's
//     notifications/progress carry it. Requesters choose tokens as they
//     choose ids, so two may choose the same; the bridge's token is its
//     request's number, unique.
//   - params.requestId of notifications/cancelled: the id of the request
//     to cancel, the bridge's at the server.
//
// Only the field changes; the params' other members are passed on as
// raw JSON (in the order of their names, as Go writes an object).

// swapProgressToken returns params with _meta.progressToken replaced by
// token, and the requester's token: nil, with params unchanged, when it
// set none.
func swapProgressToken(params, token json.RawMessage) (json.RawMessage, json.RawMessage) {
	p, ok := object(params)
	if !ok {
		return params, nil
	}
	meta, ok := object(p["_meta"])
	if !ok {
		return params, nil
	}
	old, ok := meta["progressToken"]
	if !ok || isNull(old) {
		return params, nil
	}
	meta["progressToken"] = token
	p["_meta"] = encode(meta)
	return encode(p), old
}

// member returns params' member name, or nil.
func member(params json.RawMessage, name string) json.RawMessage {
	p, ok := object(params)
	if !ok {
		return nil
	}
	return p[name]
}

// withMember returns params with its member name set to v.
func withMember(params json.RawMessage, name string, v json.RawMessage) json.RawMessage {
	p, ok := object(params)
	if !ok {
		p = map[string]json.RawMessage{}
	}
	p[name] = v
	return encode(p)
}

// object decodes a JSON object's members, raw.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if len(raw) == 0 || isNull(raw) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// numberToken is the bridge's progress token of its request number n.
func numberToken(n int64) json.RawMessage { return json.RawMessage(strconv.FormatInt(n, 10)) }

// tokenNumber reads a progress token (or a request id) the server sent
// back as one of the bridge's numbers.
func tokenNumber(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return n, err == nil
}

// idKey is a requester's JSON-RPC id as a map key: its JSON, compacted,
// so that 7 and "7" stay two ids.
func idKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}
