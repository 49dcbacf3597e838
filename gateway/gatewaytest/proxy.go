package gatewaytest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a gateway and can cut them all at
// once, as a network that fails would: each side sees its connection
// drop without a closing handshake. While it refuses, it closes the
// connections it accepts, as an unreachable gateway would.
type Proxy struct {
	URL string // http://127.0.0.1:PORT, the proxy's own address
	WS  string // ws://127.0.0.1:PORT/ws

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	refuse bool
}

// StartProxy forwards to addr (127.0.0.1:PORT) until the test ends.
func StartProxy(tb testing.TB, addr string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{
		URL: "http://" + ln.Addr().String(), WS: "ws://" + ln.Addr().String() + "/ws",
		ln: ln, target: addr, conns: map[net.Conn]bool{},
	}
	go p.serve()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
	})
	return p
}

func (p *Proxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			_ = down.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		p.conns[down], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, down)
		go pipe(down, up)
	}
}

// Cut closes every connection through the proxy, both ways, and returns
// how many it cut.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	return n
}

// Refuse makes the proxy close the connections it accepts at once, or
// forward them again.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}
