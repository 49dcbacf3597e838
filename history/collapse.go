package history

import (
	"encoding/json"

	"github.com/tidwall/gjson"
)

// Collapse returns a consumed transient envelope as history replays it
// (docs/protocol.md section 8): its payload replaced by {"collapsed": true, "summary":
// SUMMARY, "consumed_by": ID}, every other byte as relayed. The summary is
// the envelope's own lifecycle.summary token, copied as it was sent.
func Collapse(body []byte, consumedBy string) []byte {
	summary := gjson.GetBytes(body, "lifecycle.summary")
	by, _ := json.Marshal(consumedBy)
	repl := make([]byte, 0, 64+len(summary.Raw)+len(by))
	repl = append(repl, `{"collapsed":true,"summary":`...)
	if summary.Type == gjson.String {
		repl = append(repl, summary.Raw...)
	} else {
		repl = append(repl, `""`...)
	}
	repl = append(repl, `,"consumed_by":`...)
	repl = append(repl, by...)
	repl = append(repl, '}')

	payload := gjson.GetBytes(body, "payload")
	out := make([]byte, 0, len(body)+len(repl)+16)
	if !payload.Exists() {
		// payload may be absent from an envelope: the collapsed one has it.
		open := 0
		for open < len(body) && body[open] != '{' {
			open++
		}
		out = append(out, body[:open+1]...)
		out = append(out, `"payload":`...)
		out = append(out, repl...)
		if rest := body[open+1:]; len(trimSpace(rest)) > 0 && trimSpace(rest)[0] != '}' {
			out = append(out, ',')
		}
		return append(out, body[open+1:]...)
	}
	out = append(out, body[:payload.Index]...)
	out = append(out, repl...)
	return append(out, body[payload.Index+len(payload.Raw):]...)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
