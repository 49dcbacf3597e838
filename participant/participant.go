package participant

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/filter"
)

// Close codes of SPEC section 5.
const (
	StatusReplaced     websocket.StatusCode = 4000
	StatusSlowConsumer websocket.StatusCode = 4008
)

// Options are the per-connection settings of the gateway's flags.
type Options struct {
	SendQueue    int           // messages waiting for the writer before the participant is cut
	WriteTimeout time.Duration // one write (or one ping) may take this long
	PingInterval time.Duration // 0 disables pings
	// OnSlowConsumer is called once when the participant is cut for a full
	// queue (for metrics).
	OnSlowConsumer func()
	// OnWrite is called after each WebSocket message written, with the
	// number of envelopes in it (for metrics).
	OnWrite func(envelopes int)
}

// Batch limits: a batched message never holds more than this, so one
// participant's backlog turns into a few large messages, not one huge one.
const (
	maxBatchItems = 256
	maxBatchBytes = 256 << 10
)

// Participant is one connection in one pod.
type Participant struct {
	ID           string
	Pod          string
	Capabilities Capabilities
	// Protocol is what it speaks: envelope.ProtocolMCPP or ProtocolMCPX.
	Protocol string

	conn   *websocket.Conn
	opts   Options
	queue  *Queue
	filter atomic.Pointer[filter.Filter]

	// cut is set when the connection is closed at once (replaced, slow
	// consumer, fatal error): nothing more is queued or written.
	cut       atomic.Bool
	closeOnce sync.Once
	drain     atomic.Pointer[closeFrame] // set at shutdown: write what is queued, then close
	done      chan struct{}
	timer     *time.Timer // write watchdog
}

type closeFrame struct {
	code   websocket.StatusCode
	reason string
}

// New wraps an accepted connection. Start must be called to run its writer.
func New(conn *websocket.Conn, id, pod string, caps Capabilities, protocol string, f *filter.Filter, opts Options) *Participant {
	p := &Participant{
		ID: id, Pod: pod, Capabilities: caps, Protocol: protocol,
		conn: conn, opts: opts, queue: newQueue(opts.SendQueue),
		done: make(chan struct{}),
	}
	p.filter.Store(f)
	p.timer = time.AfterFunc(time.Hour, func() { _ = conn.CloseNow() })
	p.timer.Stop()
	return p
}

// Filter is the participant's current filter.
func (p *Participant) Filter() *filter.Filter { return p.filter.Load() }

// SetFilter replaces the filter; envelopes fanned out after it returns are
// decided by the new one.
func (p *Participant) SetFilter(f *filter.Filter) { p.filter.Store(f) }

// Conn is the underlying WebSocket connection, for the gateway's reader.
func (p *Participant) Conn() *websocket.Conn { return p.conn }

// Done is closed when the participant's connection has ended.
func (p *Participant) Done() <-chan struct{} { return p.done }

// Queued is the number of messages waiting to be written.
func (p *Participant) Queued() int { return p.queue.Len() }

// Deliver queues b, which the caller must never change afterwards (it is
// shared with every other recipient). When the queue is full the
// participant is cut with 4008 and Deliver reports false.
func (p *Participant) Deliver(b []byte) bool {
	if p.cut.Load() {
		return false
	}
	if p.queue.Push(b) {
		return true
	}
	if p.cut.Load() || p.drain.Load() != nil {
		return false
	}
	if p.opts.OnSlowConsumer != nil {
		p.opts.OnSlowConsumer()
	}
	p.Close(StatusSlowConsumer, "slow consumer: send queue full")
	return false
}

// Close ends the connection now with code, dropping what is queued. It
// returns at once; the closing handshake runs in the background.
func (p *Participant) Close(code websocket.StatusCode, reason string) {
	if p.cut.Swap(true) {
		return
	}
	p.queue.Close()
	go func() {
		_ = p.conn.Close(code, reason)
		p.finish()
	}()
}

// CloseAfterDrain lets the writer send what is queued, then close with
// code. Further deliveries are refused.
func (p *Participant) CloseAfterDrain(code websocket.StatusCode, reason string) {
	p.drain.CompareAndSwap(nil, &closeFrame{code, reason})
	p.queue.Close()
}

// Kill closes the TCP connection without a closing handshake.
func (p *Participant) Kill() {
	p.cut.Store(true)
	p.queue.Close()
	_ = p.conn.CloseNow()
	p.finish()
}

// Finish marks the connection as ended; the gateway's reader calls it when
// reading fails.
func (p *Participant) Finish() {
	p.cut.Store(true)
	p.queue.Close()
	p.finish()
}

func (p *Participant) finish() {
	p.closeOnce.Do(func() {
		p.timer.Stop()
		close(p.done)
	})
}

// Start runs the writer and the pinger until the connection ends.
func (p *Participant) Start() {
	go p.writeLoop()
	if p.opts.PingInterval > 0 {
		go p.pingLoop()
	}
}

func (p *Participant) writeLoop() {
	var (
		items = make([][]byte, 0, 16)
		buf   []byte
	)
	for {
		select {
		case <-p.queue.ready:
		case <-p.done:
			return
		}
		for !p.cut.Load() {
			batch := p.filter.Load().Batch
			max := 1
			if batch {
				max = maxBatchItems
			}
			items = p.queue.PopUpTo(items[:0], max)
			if len(items) == 0 {
				break
			}
			msg := items[0]
			if len(items) > 1 {
				buf = buf[:0]
				for i, it := range items {
					if i > 0 {
						buf = append(buf, '\n')
					}
					buf = append(buf, it...)
				}
				msg = buf
			}
			if err := p.write(msg); err != nil {
				p.Kill()
				return
			}
			if p.opts.OnWrite != nil {
				p.opts.OnWrite(len(items))
			}
			clear(items)
			if cap(buf) > maxBatchBytes*4 {
				buf = nil
			}
		}
		if cf := p.drain.Load(); cf != nil && p.queue.Len() == 0 && !p.cut.Swap(true) {
			_ = p.conn.Close(cf.code, cf.reason)
			p.finish()
			return
		}
	}
}

// write sends one message. The context is Background so that the library
// sets up no per-write timer; the participant's own watchdog closes the
// connection when a write outlasts WriteTimeout.
func (p *Participant) write(b []byte) error {
	if p.opts.WriteTimeout > 0 {
		p.timer.Reset(p.opts.WriteTimeout)
		defer p.timer.Stop()
	}
	return p.conn.Write(context.Background(), websocket.MessageText, b)
}

func (p *Participant) pingLoop() {
	t := time.NewTicker(p.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			timeout := p.opts.WriteTimeout
			if timeout <= 0 {
				timeout = p.opts.PingInterval
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := p.conn.Ping(ctx)
			cancel()
			if err != nil {
				p.Kill()
				return
			}
		}
	}
}
