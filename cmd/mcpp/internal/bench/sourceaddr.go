package bench

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// A connection from one source address to one server's address and port
// takes one of the ephemeral ports (/proc/sys/net/ipv4/ip_local_port_range:
// 28,232 of them by default), so 20,000 pods of 3 cannot come from one
// address. Against a server it started on loopback, --pods spreads its
// connections over the source addresses 127.0.0.1, 127.0.0.2, … (all of
// 127/8 is loopback), connsPerSource at most on each. On Linux each such
// socket is bound with IP_BIND_ADDRESS_NO_PORT, so that its port is still
// picked at connect, where a port that an earlier run's connection (to
// another server, now in TIME_WAIT) holds can be used again.
const connsPerSource = 20000

// openFilesSpare is what bench and a server need open besides one file a
// connection: listeners, pipes, /proc, the history's files.
const openFilesSpare = 256

// dialTimeout bounds one join of a --pods run, the WebSocket upgrade
// included: 64 joins at once on a loaded machine can take seconds.
const dialTimeout = 30 * time.Second

// sourceAddrs is where a --pods run's connections come from.
type sourceAddrs struct {
	ips     []net.IP       // none: the system picks, as for any dial
	clients []*http.Client // one a source address, for the gateway's client
}

// newSourceAddrs spreads conns connections over as many loopback source
// addresses as they need; spread false (a server bench did not start)
// leaves the source to the system.
func newSourceAddrs(conns int, spread bool) *sourceAddrs {
	s := &sourceAddrs{}
	n := (conns + connsPerSource - 1) / connsPerSource
	if !spread || n <= 1 {
		return s
	}
	for i := range n {
		ip := net.IPv4(127, 0, byte((i+1)>>8), byte((i+1)&0xff))
		s.ips = append(s.ips, ip)
		d := s.dialerFor(ip)
		s.clients = append(s.clients, &http.Client{Transport: &http.Transport{DialContext: d.DialContext}})
	}
	return s
}

func (s *sourceAddrs) dialerFor(ip net.IP) *net.Dialer {
	return &net.Dialer{Timeout: dialTimeout, LocalAddr: &net.TCPAddr{IP: ip}, Control: bindNoPort}
}

// dialer is connection i's dialer; nil when the system picks the source.
func (s *sourceAddrs) dialer(i int) *net.Dialer {
	if len(s.ips) == 0 {
		return nil
	}
	return s.dialerFor(s.ips[i%len(s.ips)])
}

// httpClient is connection i's client for a WebSocket upgrade; nil when
// the system picks the source.
func (s *sourceAddrs) httpClient(i int) *http.Client {
	if len(s.clients) == 0 {
		return nil
	}
	return s.clients[i%len(s.clients)]
}

// String says where the connections come from, for the report.
func (s *sourceAddrs) String() string {
	if len(s.ips) == 0 {
		return "one source address"
	}
	return fmt.Sprintf("%d source addresses (%s to %s)", len(s.ips), s.ips[0], s.ips[len(s.ips)-1])
}
