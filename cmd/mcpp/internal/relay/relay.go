// Package relay is the bare WebSocket relay that `mcpp bench --baseline`
// measures the gateway against: it reads a message and hands the same bytes
// to every other connection's queue, with no parsing, no NATS and one
// message per WebSocket frame. It is the floor of what any gateway built on
// github.com/coder/websocket can cost, so the gateway's figures are quoted
// as a ratio of it.
package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"
)

// queueLen is each connection's queue, as long as the gateway's default
// --send-queue.
const queueLen = 1024

type conn struct {
	ws   *websocket.Conn
	out  chan []byte
	dead atomic.Bool
}

// Relay is the server.
type Relay struct {
	mu    sync.RWMutex
	conns map[*conn]struct{}
	// QueueLen overrides queueLen when set.
	QueueLen int
}

// New makes an empty relay.
func New() *Relay { return &Relay{conns: make(map[*conn]struct{})} }

// Serve accepts WebSocket connections on ln, at any path, until ln closes.
func (r *Relay) Serve(ln net.Listener) error {
	err := http.Serve(ln, http.HandlerFunc(r.serveWS))
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (r *Relay) serveWS(w http.ResponseWriter, req *http.Request) {
	ws, err := websocket.Accept(w, req, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(4 << 20)
	n := queueLen
	if r.QueueLen > 0 {
		n = r.QueueLen
	}
	c := &conn{ws: ws, out: make(chan []byte, n)}
	r.mu.Lock()
	r.conns[c] = struct{}{}
	r.mu.Unlock()
	go c.writeLoop()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.dead.Store(true)
		close(c.out)
		_ = ws.CloseNow()
	}()
	ctx := context.Background()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		r.mu.RLock()
		for o := range r.conns {
			if o == c || o.dead.Load() {
				continue
			}
			select {
			case o.out <- b:
			default:
				// Like the gateway's slow-consumer rule: never block the
				// others on one full queue.
				if !o.dead.Swap(true) {
					go o.ws.Close(4008, "slow consumer")
				}
			}
		}
		r.mu.RUnlock()
	}
}

func (c *conn) writeLoop() {
	ctx := context.Background()
	for b := range c.out {
		if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
			c.dead.Store(true)
			for range c.out {
			}
			return
		}
	}
}

// Main is the hidden `mcpp _relay` command that bench starts in its own
// process: `_relay --listen HOST:PORT [--queue N]`.
func Main(args []string) int {
	fs := flag.NewFlagSet("mcpp _relay", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	queue := fs.Int("queue", queueLen, "queue per connection")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	r := New()
	r.QueueLen = *queue
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
		<-sigs
		ln.Close()
	}()
	if err := r.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	return 0
}
