package pod

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/wire"
)

// TestServerNotices: OnServers hears of an MCP server's joining, and of
// the notifications of its lists and resources that it sends the pod
// (the resource's URI with an update), and of nothing else: not another
// notification of the server's, and not the same notifications from a
// participant that serves nothing.
func TestServerNotices(t *testing.T) {
	n, _ := testNode(t, 100, nil)
	var mu sync.Mutex
	var heard []ServerChange
	n.OnServers = func(_ *Pod, c ServerChange) {
		mu.Lock()
		heard = append(heard, c)
		mu.Unlock()
	}
	p := openPod(t, n, "notices")
	plain := join(t, p, "plain", joinOpts{})
	notify := func(m *member, method string, params map[string]any) {
		m.send(map[string]any{"kind": wire.KindMCPNotification, "payload": map[string]any{"jsonrpc": "2.0", "method": method, "params": params}})
	}
	for _, method := range []string{toolsChanged, resourcesChanged, promptsChanged} {
		notify(plain, method, nil)
	}
	notify(plain, resourceUpdated, map[string]any{"uri": "x://plain"})
	srv := join(t, p, "srv", joinOpts{serves: []string{wire.ServesMCP}})
	notify(srv, "notifications/message", map[string]any{"level": "info", "data": "not a change"})
	notify(srv, resourcesChanged, nil)
	notify(srv, promptsChanged, nil)
	notify(srv, toolsChanged, nil)
	notify(srv, resourceUpdated, map[string]any{"uri": "x://srv/a b"})

	want := []ServerChange{
		{Server: "srv"},
		{Server: "srv", Notification: resourcesChanged},
		{Server: "srv", Notification: promptsChanged},
		{Server: "srv", Notification: toolsChanged},
		{Server: "srv", Notification: resourceUpdated, URI: "x://srv/a b"},
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(heard)
		mu.Unlock()
		if len(got) >= len(want) {
			// The handler runs in a goroutine of its own: any order.
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			got = slices.Clone(heard)
			mu.Unlock()
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Fatalf("OnServers heard %+v, without %+v", got, w)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("OnServers heard %+v, want %+v alone", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("OnServers heard %+v within 10s, want %+v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
