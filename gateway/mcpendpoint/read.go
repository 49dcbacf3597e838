package mcpendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// pod_read's bounds (docs/protocol.md section 9).
const (
	defaultReadLimit = 50
	maxReadLimit     = 1000
	maxReadWait      = 30 * time.Second
)

// read returns, oldest first, at most limit envelopes of the pod's history
// after the member's cursor that its filter admits, folded as a replay folds
// them (docs/protocol.md sections 8 and 9), and moves the cursor past them.
// With nothing there it waits up to wait for the history to change
// (Index.Changed: no polling), so that an agent's read returns as soon as
// something arrives. The answer holds at most 4 × --max-message-bytes of
// envelopes, like gateway/history's, and at most maxTokens tokens (0: no
// bound); more says there is more to read.
func (m *member) read(ctx context.Context, limit, maxTokens int, wait time.Duration) (*pod.RawHistory, error) {
	x := m.pod.Index()
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		// Taken before looking, so that a change after the look wakes us.
		changed := x.Changed()
		answer, err := m.readOnce(ctx, x, limit, maxTokens)
		// An envelope over maxTokens is waiting: that is news too (more is
		// set), however long the wait.
		if err != nil || len(answer.Envelopes) > 0 || answer.More || timer == nil {
			return answer, err
		}
		select {
		case <-changed:
		case <-timer:
			timer = nil // look once more, and answer what is there
		case <-ctx.Done():
			return nil, fmt.Errorf("pod_read: %w", ctx.Err())
		case <-m.done:
			return nil, errSessionEnded
		case <-m.e.stopping:
			return answer, nil
		}
	}
}

// readOnce reads what is there after the cursor. A look that finds
// nothing still moves the cursor past the entries the filter did not
// admit, so that a waiting read never looks at them again.
func (m *member) readOnce(ctx context.Context, x *history.Index, limit, maxTokens int) (*pod.RawHistory, error) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	f := m.filter.Load()
	sel := x.Since(m.cursor, limit, maxTokens, true, func(meta *envelope.Meta) bool { return f.Admits(meta, m.id) })
	answer := &pod.RawHistory{Envelopes: []json.RawMessage{}, More: sel.More}
	// One answer carries at most what gateway/history's does (at least
	// one envelope): the rest is read next time.
	bytes, n := 0, 0
	for n < len(sel.Entries) && (n == 0 || bytes+sel.Entries[n].Size <= 4*m.e.g.Node.Config.MaxMessageBytes) {
		bytes += sel.Entries[n].Size
		n++
	}
	if n < len(sel.Entries) {
		sel.Entries, sel.Last, answer.More = sel.Entries[:n], sel.Entries[n-1].Pos, true
	}
	if len(sel.Entries) == 0 {
		m.cursor = sel.Last
		return answer, nil
	}
	rctx, cancel := context.WithTimeout(ctx, pod.ReadTimeout)
	defer cancel()
	_, err := m.pod.Render(rctx, wire.ProtocolMCPP, sel.Entries, func(b []byte) { answer.Envelopes = append(answer.Envelopes, b) })
	for _, e := range sel.Entries[:len(answer.Envelopes)] {
		answer.Tokens += e.Tokens
	}
	var missing *pod.EntryGoneError
	switch got := len(answer.Envelopes); {
	case err == nil:
		m.cursor = sel.Last
	case errors.As(err, &missing):
		// Discarded by --history-bytes or --history-age since the index
		// chose it: what came before it is read, and the next read goes on
		// after it.
		m.cursor, answer.More = missing.Pos, true
	case got > 0:
		m.cursor, answer.More = sel.Entries[got-1].Pos, true
	default:
		return nil, fmt.Errorf("pod_read: reading the pod's history: %w", err)
	}
	return answer, nil
}
