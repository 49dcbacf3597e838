package integration

import (
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	g := startGateway(t, nil)
	a := g.dial(t, "lab", "alice", "")
	b := g.dial(t, "lab", "bob", "")
	j := a.expectKind("system/presence")
	t.Logf("presence: %v", j)
	a.send(map[string]any{"kind": "chat", "payload": map[string]any{"text": "hi"}})
	m := b.expectKind("chat")
	t.Logf("got %v", m)
	a.send(map[string]any{"kind": "chat", "context": map[string]any{"id": "r1", "type": "reasoning"}})
	t.Logf("got %v", b.expectKind("chat"))
	a.send(map[string]any{"kind": "conclusion", "context": map[string]any{"id": "r1"}})
	t.Logf("got %v", b.expectKind("conclusion"))
	t.Logf("got %v", b.expectKind("system/context"))
	a.expectKind("system/context")
	a.send(map[string]any{"kind": "system/x"})
	a.expectError("reserved_kind")
	a.expectNothing(100 * time.Millisecond)
}
