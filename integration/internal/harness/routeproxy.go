package harness

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// RouteProxy stands in front of one node's cluster (route) port, as
// gatewaytest.Proxy stands in front of a gateway's clients' port: the node
// advertises the proxy's address (--cluster-advertise), and every node's
// --routes names the proxies, so that every route between two nodes goes
// through the proxy of the node that was dialled. The proxy can then cut
// the routes of one node from the others, as a network that fails would:
// each side sees its connection drop without a word, and new ones are
// closed as soon as they are made, until it is restored.
//
// A route is dialled by either of its two nodes, so the proxy learns who
// dialled each connection from the first line the dialler sends, NATS's
// route CONNECT, whose "name" is the dialler's server id (nats-server's
// route.go, sendRouteConnect). RouteNet isolates a node by cutting its
// own proxy and, in the others', the connections it dialled.
type RouteProxy struct {
	Addr   string // 127.0.0.1:PORT, what the node advertises
	target string
	ln     net.Listener

	mu    sync.Mutex
	conns map[*routeConn]bool
	// down refuses every connection (the node behind is cut off);
	// refused are the server ids whose connections are refused.
	down    bool
	refused map[string]bool
}

type routeConn struct {
	down, up net.Conn
	dialler  string // the dialling server's id, once its CONNECT came
}

func (c *routeConn) close() {
	_ = c.down.Close()
	_ = c.up.Close()
}

// StartRouteProxy forwards to target (the node's --cluster-listen) until
// the test ends. It listens on a port of its own, at once, so that the
// node can be told it before it starts.
func StartRouteProxy(tb testing.TB, target string) *RouteProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &RouteProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[*routeConn]bool{}, refused: map[string]bool{}}
	go p.serve()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.cut(func(*routeConn) bool { return true })
	})
	return p
}

func (p *RouteProxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(down)
	}
}

// forward carries one connection: the node's answers at once, the
// dialler's bytes from its CONNECT line on, once the proxy knows who it
// is and may let it through.
func (p *RouteProxy) forward(down net.Conn) {
	p.mu.Lock()
	refuse := p.down
	p.mu.Unlock()
	if refuse {
		_ = down.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = down.Close()
		return
	}
	c := &routeConn{down: down, up: up}
	p.mu.Lock()
	p.conns[c] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	go func() {
		_, _ = io.Copy(down, up)
		c.close()
	}()
	r := bufio.NewReaderSize(down, 64<<10)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	id := connectName(line)
	p.mu.Lock()
	c.dialler = id
	refuse = p.down || p.refused[id]
	p.mu.Unlock()
	if refuse {
		return
	}
	if _, err := io.WriteString(up, line); err != nil {
		return
	}
	_, _ = io.Copy(up, r)
}

// connectName reads the server id of a route's CONNECT line, or "".
func connectName(line string) string {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "CONNECT ")
	if !ok {
		return ""
	}
	var v struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal([]byte(rest), &v)
	return v.Name
}

// cut closes the connections that match, and returns how many.
func (p *RouteProxy) cut(match func(*routeConn) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if match(c) {
			c.close()
			delete(p.conns, c)
			n++
		}
	}
	return n
}

// RouteNet is the proxies of a cluster's nodes, one each, in the nodes'
// order, and the server id each node has now (which changes when it
// restarts: SetID).
type RouteNet struct {
	Proxies []*RouteProxy
	mu      sync.Mutex
	ids     []string
}

// NewRouteNet starts one proxy for each of targets (the nodes' cluster
// addresses).
func NewRouteNet(tb testing.TB, targets []string) *RouteNet {
	n := &RouteNet{ids: make([]string, len(targets))}
	for _, t := range targets {
		n.Proxies = append(n.Proxies, StartRouteProxy(tb, t))
	}
	return n
}

// SetID records node i's server id.
func (n *RouteNet) SetID(i int, id string) {
	n.mu.Lock()
	n.ids[i] = id
	n.mu.Unlock()
}

// Isolate cuts node i's routes to every other node and refuses new ones
// until Restore: the connections to it (its own proxy), and those it
// dialled to the others (their proxies, by its server id). It returns how
// many connections it cut.
func (n *RouteNet) Isolate(i int) int {
	n.mu.Lock()
	id := n.ids[i]
	n.mu.Unlock()
	cut := 0
	own := n.Proxies[i]
	own.mu.Lock()
	own.down = true
	own.mu.Unlock()
	cut += own.cut(func(*routeConn) bool { return true })
	for j, p := range n.Proxies {
		if j == i {
			continue
		}
		p.mu.Lock()
		p.refused[id] = true
		p.mu.Unlock()
		cut += p.cut(func(c *routeConn) bool { return c.dialler == id })
	}
	return cut
}

// Restore lets node i's routes be made again (NATS dials them again by
// itself).
func (n *RouteNet) Restore(i int) {
	for j, p := range n.Proxies {
		p.mu.Lock()
		if j == i {
			p.down = false
		}
		clear(p.refused)
		p.mu.Unlock()
	}
}
