package history

import (
	"encoding/json"
	"math"

	"github.com/mcpp/gateway/envelope"
)

// What entries cost in tokens (envelope.EstimateTokens), as a replay
// sends them: a consumed transient envelope collapsed, every other one as
// stored. Replays within a budget (NewestWithin), gateway/history's
// max_tokens (PageQuery.MaxTokens) and a reader's cursor (Since) add
// these up.

// emptyConsumer is the consumer's id in the collapsed form Apply builds
// before the consumer is known; the weight of what replaces it is added
// when it is (addConsumer).
var emptyConsumer = []byte(`""`)

// collapsedWeight is the envelope.TokenWeight and the length of body
// collapsed (Collapse) with an empty consumer, less that empty string:
// what addConsumer completes. Collapse writes `"consumed_by":ID}`, so the
// id always comes after a ':' and before a '}', and the weight of the
// rest does not depend on it. A body that is not a JSON object (a gateway
// stores none) is not estimated collapsed: 0, 0.
func collapsedWeight(body []byte) (weight, length int32) {
	i := 0
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	if i == len(body) || body[i] != '{' {
		return 0, 0
	}
	c := Collapse(body, "")
	w := envelope.TokenWeight(c, ' ') - envelope.TokenWeight(emptyConsumer, ':')
	return clamp32(w), clamp32(len(c) - len(emptyConsumer))
}

// addConsumer completes the collapsed form's weight with its consumer's
// id, as Collapse writes it.
func (e *Entry) addConsumer(by string) {
	if e.collapseLen == 0 {
		return
	}
	id, _ := json.Marshal(by)
	e.collapseWeight = clamp32(int(e.collapseWeight) + envelope.TokenWeight(id, ':'))
	e.collapseLen = clamp32(int(e.collapseLen) + len(id))
}

// sentTokens is what e costs as a selection sends it: collapsed when
// collapse is set and it was consumed, whole otherwise.
func (e *Entry) sentTokens(collapse bool) int {
	if collapse && e.consumedBy.n != 0 && e.collapseLen > 0 {
		return envelope.TokensOf(int(e.collapseWeight), int(e.collapseLen))
	}
	return int(e.tokens)
}

func clamp32(v int) int32 { return int32(min(v, math.MaxInt32)) }
