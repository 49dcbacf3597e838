package integration

import (
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

func TestSmoke(t *testing.T) {
	g := harness.StartGateway(t, nil)
	a := g.Dial(t, "lab", "alice", "")
	b := g.Dial(t, "lab", "bob", "")
	j := a.ExpectKind("system/presence")
	t.Logf("presence: %v", j)
	a.Send(map[string]any{"kind": "chat", "payload": map[string]any{"text": "hi"}})
	m := b.ExpectKind("chat")
	t.Logf("got %v", m)
	a.Send(map[string]any{"kind": "chat", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	t.Logf("got %v", b.ExpectKind("chat"))
	a.Send(map[string]any{"kind": "conclusion", "context": map[string]any{"id": "r1"}})
	t.Logf("got %v", b.ExpectKind("conclusion"))
	t.Logf("got %v", b.ExpectKind("system/context"))
	a.ExpectKind("system/context")
	a.Send(map[string]any{"kind": "system/x"})
	a.ExpectError("reserved_kind")
	a.ExpectNothing(100 * time.Millisecond)
}
