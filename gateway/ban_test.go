package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/wire"
)

// Issue 31: a kick holds at the moment it is applied, whatever the
// timing: an upgrade under way when its participant is banned does not
// join (on the node that took the kick, and on another), and the rest of
// a POST's body after a kick is refused. The hooks of export_test.go hold
// an upgrade, or a POST, at the moment between two checks.

// holdJoin holds the upgrades of participant id between their admission
// and their join until release is closed; held is closed when one is.
func holdJoin(t *testing.T, id string) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	gateway.SetHookBeforeJoin(func(_, participant string) {
		if participant == id {
			once.Do(func() { close(held) })
			<-release
		}
	})
	t.Cleanup(func() { gateway.SetHookBeforeJoin(nil) })
	return held, release
}

// member is a participant's raw connection and what it reads.
type member struct {
	c  *websocket.Conn
	in chan map[string]any
	// closed receives the connection's close status once it ends.
	closed chan websocket.StatusCode
}

// dial joins pod as id (with echo=1, so that a member sees its own
// envelopes come back in the pod's order).
func dial(t *testing.T, ws, pod, id string) *member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, fmt.Sprintf("%s?pod=%s&participant=%s&echo=1", ws, pod, id), nil)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	m := &member{c: c, in: make(chan map[string]any, 1024), closed: make(chan websocket.StatusCode, 1)}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				m.closed <- websocket.CloseStatus(err)
				close(m.in)
				return
			}
			var v map[string]any
			_ = json.Unmarshal(b, &v)
			m.in <- v
		}
	}()
	return m
}

func (m *member) send(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := m.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// until reads m until an envelope satisfies ok, failing after 20 s, and
// returns what it read before.
func (m *member) until(t *testing.T, what string, ok func(map[string]any) bool) []map[string]any {
	t.Helper()
	var before []map[string]any
	deadline := time.After(20 * time.Second)
	for {
		select {
		case v, open := <-m.in:
			if !open {
				t.Fatalf("the connection ended before %s", what)
			}
			if ok(v) {
				return before
			}
			before = append(before, v)
		case <-deadline:
			t.Fatalf("no %s within 20s", what)
		}
	}
}

func kindIs(kind string) func(map[string]any) bool {
	return func(v map[string]any) bool { return v["kind"] == kind }
}

func idIs(id string) func(map[string]any) bool {
	return func(v map[string]any) bool { return v["id"] == id }
}

// joined reports whether a presence join of id is among msgs.
func joined(msgs []map[string]any, id string) bool {
	for _, v := range msgs {
		if v["kind"] != wire.KindPresence {
			continue
		}
		pl, _ := v["payload"].(map[string]any)
		who, _ := pl["participant"].(map[string]any)
		if pl["event"] == "join" && who["id"] == id {
			return true
		}
	}
	return false
}

// TestBanHoldsAtJoin: a participant banned while its upgrade is under way
// (admitted, not yet joined) does not join: its connection is closed with
// 4410 before any welcome, and nobody is told of a join.
func TestBanHoldsAtJoin(t *testing.T) {
	srv := gatewaytest.Start(t, gatewaytest.Config())
	const pod = "ban-race"
	mod := dial(t, srv.WS, pod, "mod")
	mod.until(t, "mod's welcome", kindIs(wire.KindWelcome))
	held, release := holdJoin(t, "victim")
	victim := make(chan *member, 1)
	go func() { victim <- dial(t, srv.WS, pod, "victim") }()
	<-held
	mod.send(t, map[string]any{"id": "k", "kind": wire.RequestKick, "payload": map[string]any{"participant": "victim", "ban_ms": 60000}})
	mod.until(t, "the kick's answer", kindIs(wire.KindKick))
	close(release)
	v := <-victim
	select {
	case code := <-v.closed:
		if code != websocket.StatusCode(wire.CloseKicked) {
			t.Fatalf("the banned upgrade closed with %d, want %d", code, wire.CloseKicked)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the banned upgrade was not closed")
	}
	for m := range v.in {
		t.Fatalf("the banned participant received %v", m)
	}
	mod.send(t, map[string]any{"id": "end", "kind": "chat"})
	if before := mod.until(t, "mod's own end", idIs("end")); joined(before, "victim") {
		t.Fatalf("mod was told the banned participant joined: %v", before)
	}
}

// TestBanHoldsAtJoinOnAnotherNode: the same, the kick taken on one node of
// a cluster and the upgrade held on another: once the other node has
// applied the kick (in the pod's order, before what follows it), the
// upgrade it releases does not join.
func TestBanHoldsAtJoinOnAnotherNode(t *testing.T) {
	ports := []int{freePort(t), freePort(t)}
	routes := fmt.Sprintf("nats-route://127.0.0.1:%d,nats-route://127.0.0.1:%d", ports[0], ports[1])
	var nodes []*gatewaytest.Server
	for _, port := range ports {
		cfg := gatewaytest.Config()
		cfg.ClusterName, cfg.ClusterListen, cfg.Routes = "ban-test", fmt.Sprintf("127.0.0.1:%d", port), routes
		cfg.ClusterHeartbeat = 200 * time.Millisecond
		nodes = append(nodes, gatewaytest.Start(t, cfg))
	}
	for _, n := range nodes {
		waitHealthy(t, n.URL)
	}
	const pod = "ban-race-cluster"
	mod := dial(t, nodes[0].WS, pod, "mod")
	mod.until(t, "mod's welcome", kindIs(wire.KindWelcome))
	watcher := dial(t, nodes[1].WS, pod, "watcher")
	watcher.until(t, "the watcher's welcome", kindIs(wire.KindWelcome))
	held, release := holdJoin(t, "victim")
	victim := make(chan *member, 1)
	go func() { victim <- dial(t, nodes[1].WS, pod, "victim") }()
	<-held
	mod.send(t, map[string]any{"id": "k", "kind": wire.RequestKick, "payload": map[string]any{"participant": "victim", "ban_ms": 60000}})
	mod.until(t, "the kick's answer", kindIs(wire.KindKick))
	// What mod sends after the kick reaches node 2 after it: node 2 has
	// applied the kick once the watcher has it.
	mod.send(t, map[string]any{"id": "after-kick", "kind": "chat"})
	watcher.until(t, "mod's envelope after the kick", idIs("after-kick"))
	close(release)
	v := <-victim
	select {
	case code := <-v.closed:
		if code != websocket.StatusCode(wire.CloseKicked) {
			t.Fatalf("the banned upgrade on node 2 closed with %d, want %d", code, wire.CloseKicked)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the banned upgrade on node 2 was not closed")
	}
	mod.send(t, map[string]any{"id": "end", "kind": "chat"})
	if before := watcher.until(t, "mod's end", idIs("end")); joined(before, "victim") {
		t.Fatalf("the watcher was told the banned participant joined: %v", before)
	}
}

// TestKickStopsThePOSTBody: a participant kicked while its POST's body is
// handled has the rest of the body refused (forbidden); nobody receives
// it.
func TestKickStopsThePOSTBody(t *testing.T) {
	srv := gatewaytest.Start(t, gatewaytest.Config())
	const pod = "post-kick"
	mod := dial(t, srv.WS, pod, "mod")
	mod.until(t, "mod's welcome", kindIs(wire.KindWelcome))
	held, release := make(chan struct{}), make(chan struct{})
	gateway.SetHookPublishLine(func(_, participant string, line int) {
		if participant == "poster" && line == 1 {
			close(held)
			<-release
		}
	})
	t.Cleanup(func() { gateway.SetHookPublishLine(nil) })
	var body bytes.Buffer
	for i := range 5 {
		fmt.Fprintf(&body, `{"id":"p%d","kind":"chat"}`+"\n", i)
	}
	answer := make(chan wire.PublishAnswer, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/pods/"+pod+"/envelopes?participant=poster", "application/x-ndjson", &body)
		if err != nil {
			t.Error(err)
			answer <- wire.PublishAnswer{}
			return
		}
		defer resp.Body.Close()
		var a wire.PublishAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		answer <- a
	}()
	<-held
	mod.send(t, map[string]any{"id": "k", "kind": wire.RequestKick, "payload": map[string]any{"participant": "poster"}})
	mod.until(t, "the kick's answer", kindIs(wire.KindKick))
	close(release)
	a := <-answer
	var codes []string
	for _, r := range a.Results {
		if r.Error != nil {
			codes = append(codes, string(r.Error.Code))
		} else {
			codes = append(codes, "ok")
		}
	}
	if got := strings.Join(codes, " "); got != "ok forbidden forbidden forbidden forbidden" {
		t.Fatalf("the POST's results: %s", got)
	}
	mod.send(t, map[string]any{"id": "end", "kind": "chat"})
	for _, v := range mod.until(t, "mod's end", idIs("end")) {
		if id, _ := v["id"].(string); strings.HasPrefix(id, "p") && id != "p0" {
			t.Fatalf("mod received %v, sent after the kick", v)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitHealthy waits until a node's /healthz answers 200 (its cluster's
// JetStream formed).
func waitHealthy(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never became healthy", base)
}
