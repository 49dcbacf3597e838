package participant

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/filter"
	"github.com/mcpp/gateway/wire"
)

// CloseStatus is the status code of a close frame.
type CloseStatus = websocket.StatusCode

// The close codes the gateway sends (docs/protocol.md section 5), as the
// WebSocket library's status codes.
const (
	StatusGoingAway     = websocket.StatusCode(wire.CloseGoingAway)     // the gateway is shutting down
	StatusInternalError = websocket.StatusCode(wire.CloseInternalError) // a replay was interrupted: resume again
	StatusReplaced      = websocket.StatusCode(wire.CloseReplaced)      // another connection joined with the same id
	StatusSlowConsumer  = websocket.StatusCode(wire.CloseSlowConsumer)  // its send queue filled
	StatusOrderLost     = websocket.StatusCode(wire.CloseOrderLost)     // its node lost the pod's order: resume
	StatusTokenExpired  = websocket.StatusCode(wire.CloseTokenExpired)  // its token expired, unrefreshed
	StatusRevoked       = websocket.StatusCode(wire.CloseRevoked)       // its token was revoked
	StatusKicked        = websocket.StatusCode(wire.CloseKicked)        // a moderator removed it (gateway/kick)
)

// Why a participant is cut: the reason label of the gateway's
// mcpp_cuts_total and of its log line.
const (
	CutSlowConsumer = "slow_consumer" // its send queue was full (4008)
	CutWriteTimeout = "write_timeout" // a write to it took longer than the write timeout
	CutPingTimeout  = "ping_timeout"  // it did not answer a ping within the write timeout
)

// Options are the per-connection settings of the gateway's flags.
type Options struct {
	SendQueue      int           // messages waiting for the writer before the participant is cut
	SendQueueBytes int           // their bytes (one message is always let in, whatever its size)
	WriteTimeout   time.Duration // one write (or one ping) may take this long
	// OnCut is called once when the participant is cut, with why (one
	// of the Cut reasons), for the gateway's log and metrics.
	OnCut func(reason string)
	// OnWrite is called after each write, with the number of WebSocket
	// messages in it (for metrics).
	OnWrite func(messages int)
	// Serves is what the participant said it answers requests of at its
	// upgrade (wire.ServesMCP), shown in its identity.
	Serves []string
	// Observe is set for a connection that watches the pod without being
	// present in it (observe=1).
	Observe bool
}

// Write limits: one write (and so one batched message) holds at most
// maxBatchItems messages and maxBatchBytes (or one message larger than
// that), so that one participant's backlog goes out in a few large writes,
// not one huge one.
const (
	maxBatchItems = 256
	// 64 KiB per write amortizes the system call over 256 small
	// envelopes or 16 of 4 KiB, and keeps the pooled buffers reusable.
	maxBatchBytes = 64 << 10
)

// Participant is one connection in one pod.
type Participant struct {
	ID  string
	Pod string
	// Protocol is what it speaks: wire.ProtocolMCPP or ProtocolMCPX.
	Protocol string
	// Since is when its connection was accepted (New), for an operator.
	Since time.Time
	// JoinSeq is the node's frame sequence when it joined (set by the
	// pod before the participant is in its fan-out).
	JoinSeq uint64
	// FlushMark is the pod fan-out's: the burst in which it last queued
	// something for the participant (so that it flushes it once).
	FlushMark uint64
	// flushDue is set while a burst of the pod's fan-out has queued
	// something for the participant that it will Flush at its end.
	flushDue atomic.Bool

	conn   *websocket.Conn
	nc     *Conn // the hijacked connection under conn, where the writer writes
	opts   Options
	queue  Queue // in the participant: one object less a connection
	filter atomic.Pointer[filter.Filter]
	// caps are what it may send, and credential what admitted it: both
	// change when it refreshes its token (gateway/refresh).
	caps       atomic.Pointer[capability.Set]
	credential atomic.Pointer[Credential]
	// source feeds the writer before the queue (a joiner's welcome and
	// replay); set by Start, read and cleared by the writer alone.
	source Source

	// cut is set once the connection is ending (Close, Kill, Finish, or
	// the drain's close under way): nothing more is queued, and nothing
	// more is written but the close frame.
	cut       atomic.Bool
	closeOnce sync.Once
	drain     atomic.Pointer[closeFrame] // set at shutdown: write what is queued, then close
	done      chan struct{}

	// The writer goroutine runs only while there is something to write and
	// a little after: an idle connection holds no goroutine but its reader.
	writerOn atomic.Bool
	started  atomic.Bool // no writer runs before Start
	park     chan struct{}
	writes   atomic.Uint64 // writes made, for Watch
	seen     uint64        // writes at the previous Watch
	// writeStart is when the writer goroutine's write in progress began
	// (unix ns), or 0; writeNow never waits on the socket, and sets none.
	writeStart atomic.Int64
	pinging    atomic.Bool
	reported   atomic.Bool // a cut was reported
}

type closeFrame struct {
	code   websocket.StatusCode
	reason string
}

// Credential is what admitted a participant: when its token expires
// (zero: never), and how the gateway tells that it was revoked (nil:
// never).
type Credential struct {
	Expires time.Time
	Revoked func() bool
}

// New wraps an accepted connection; nc is the connection SmallBuffers
// hijacked under it.
func New(conn *websocket.Conn, nc *Conn, id, pod string, caps *capability.Set, cred *Credential, protocol string, f *filter.Filter, opts Options) *Participant {
	p := &Participant{
		ID: id, Pod: pod, Protocol: protocol, Since: time.Now(),
		conn: conn, nc: nc, opts: opts,
		done: make(chan struct{}), park: make(chan struct{}, 1),
	}
	p.queue.init(opts.SendQueue, opts.SendQueueBytes)
	p.filter.Store(f)
	p.caps.Store(caps)
	if cred == nil {
		cred = &Credential{}
	}
	p.credential.Store(cred)
	return p
}

// Serves is what the participant answers requests of (Options.Serves).
func (p *Participant) Serves() []string { return p.opts.Serves }

// Observes reports whether the connection watches without being present
// (Options.Observe).
func (p *Participant) Observes() bool { return p.opts.Observe }

// Caps is what the participant may send (its token's capabilities).
func (p *Participant) Caps() *capability.Set { return p.caps.Load() }

// Credential is what admitted the participant.
func (p *Participant) Credential() *Credential { return p.credential.Load() }

// Refresh replaces the participant's capabilities and credential (a
// fresh token): envelopes read after it are judged by them.
func (p *Participant) Refresh(caps *capability.Set, cred *Credential) {
	p.caps.Store(caps)
	p.credential.Store(cred)
}

// Filter is the participant's current filter.
func (p *Participant) Filter() *filter.Filter { return p.filter.Load() }

// SetFilter replaces the filter; envelopes fanned out after it returns are
// decided by the new one.
func (p *Participant) SetFilter(f *filter.Filter) { p.filter.Store(f) }

// Conn is the underlying WebSocket connection, for the gateway's reader.
func (p *Participant) Conn() *websocket.Conn { return p.conn }

// NetConn is the connection under it, which tells the gateway's reader
// whether another message has come whole (Conn.MessageBuffered).
func (p *Participant) NetConn() *Conn { return p.nc }

// Done is closed when the participant's connection has ended.
func (p *Participant) Done() <-chan struct{} { return p.done }

// Queued is the number of messages waiting to be written, and their bytes.
func (p *Participant) Queued() (n, bytes int) { return p.queue.Size() }

// Enqueue queues body, an envelope of the pod, which the caller must never
// change afterwards (it is shared with every other recipient and written
// as it is, framed by the writer). When the queue is full the participant
// is cut with 4008 and Enqueue reports false; once the participant is
// closing it takes no more.
//
// Enqueue does not wake the writer: the pod's fan-out queues a burst of
// envelopes for each participant and then calls Flush once for each, so
// that the burst goes out in one write per connection. Until then a
// writer woken by an earlier flush waits for this one rather than write
// part of the burst: the way nats-server's writer waits while producers
// that queued for it are about to flush, so that a busy pod's envelopes
// go out in fewer, larger writes; nothing waits on a timer.
func (p *Participant) Enqueue(body []byte) bool {
	if !p.push(body, false) {
		return false
	}
	p.flushDue.Store(true)
	return true
}

// Flush wakes the writer for what Enqueue queued.
func (p *Participant) Flush() {
	p.flushDue.Store(false)
	p.wakeWriter()
}

// Answer queues body, a message of the gateway to this participant alone
// (its welcome, an error, the answer to a request), and wakes the writer:
// like Enqueue and Flush, but also while the participant is closing, until
// its close frame is written, so that what it sent in the meantime is
// still answered. As with Enqueue, body is written as it is: never change
// it afterwards.
func (p *Participant) Answer(body []byte) bool {
	if !p.push(body, true) {
		return false
	}
	p.wakeWriter()
	return true
}

func (p *Participant) push(frame []byte, answer bool) bool {
	if p.cut.Load() {
		return false
	}
	if p.queue.Push(frame, answer) {
		return true
	}
	if p.cut.Load() || p.drain.Load() != nil {
		return false
	}
	p.cutFor(CutSlowConsumer)
	p.Close(StatusSlowConsumer, "slow consumer: send queue full")
	return false
}

// cutFor reports a cut once.
func (p *Participant) cutFor(reason string) {
	if p.opts.OnCut != nil && p.reported.CompareAndSwap(false, true) {
		p.opts.OnCut(reason)
	}
}

// wakeWriter tells the writer there is something to write. When none is
// at work, the caller becomes it and writes what is queued itself, at
// once (writeNow): a connection that takes what it is sent holds no
// writer goroutine, and a delivery waits for no goroutine to be woken.
// The writer goroutine starts only for what writeNow leaves to it: what
// the socket did not take at once, a joiner's replay, a drain.
func (p *Participant) wakeWriter() {
	if !p.started.Load() {
		return // Start wakes it
	}
	if p.writerOn.Load() || !p.writerOn.CompareAndSwap(false, true) {
		p.queue.signal() // the writer at work takes it
		return
	}
	if !p.writeNow() {
		go p.writeLoop()
	}
}

// writeNow writes what is queued from the caller's goroutine, with the
// writer's role (writerOn) and without ever waiting: not on the socket,
// whose rest the writer goroutine writes, and not on a write of the
// library's under way. It reports false when the writer goroutine must
// take over (writerOn still held), true when it let the role go.
func (p *Participant) writeNow() bool {
	c := p.nc
	if p.source != nil || p.drain.Load() != nil || c == nil || c.wraw == nil || !c.wmu.TryLock() {
		return false
	}
	if c.rest != nil {
		c.wmu.Unlock()
		return false
	}
	// Up to 8 messages are popped onto the stack; a burst of more into a
	// pooled list, which holds them all (maxBatchItems): popping them
	// into one that grows would allocate for each burst.
	var small [8][]byte
	dst := small[:0]
	var list *[][]byte
	if n, _ := p.queue.Size(); n > len(small) {
		list = popLists.Get().(*[][]byte)
		dst = (*list)[:0]
	}
	items := p.queue.PopUpTo(dst, maxBatchItems, maxBatchBytes)
	if list != nil {
		defer putPopList(list)
	}
	if len(items) > 0 && !p.cut.Load() {
		msgs, bp := p.frame(items, p.filter.Load().Batch)
		clear(items)
		p.writes.Add(1)
		ok, err := c.tryWriteLocked(bp)
		c.wmu.Unlock()
		if err != nil {
			p.Kill()
			p.writerOn.Store(false)
			return true
		}
		if p.opts.OnWrite != nil {
			p.opts.OnWrite(msgs)
		}
		if !ok {
			return false // the socket is full: the writer goroutine waits on it
		}
	} else {
		c.wmu.Unlock()
	}
	p.writerOn.Store(false)
	// What was queued once the queue was popped, or a drain begun, by one
	// who saw the role taken is still this writer's to do: the writer
	// goroutine writes it, or sends the drain's close frame.
	if (p.queue.Len() > 0 || p.drain.Load() != nil) && !p.cut.Load() && p.writerOn.CompareAndSwap(false, true) {
		return false
	}
	return true
}

// Source feeds the writer ahead of the queue: a joiner's welcome and its
// replay of the pod's history, read as the connection takes them so that a
// long replay never sits in memory whole. What is delivered meanwhile
// queues behind it.
type Source interface {
	// Next appends to dst at most max messages of at most maxBytes in all
	// (at least one while any is left) and returns it; nothing appended
	// means the source is done. An error ends the connection, with the
	// error's text as the close reason.
	Next(dst [][]byte, max, maxBytes int) ([][]byte, error)
}

// Start lets the writer send what src gives (when not nil), then what is
// queued and what comes. Until then deliveries only queue: the pod makes
// the participant a member and only then starts it, so that nothing
// accepted after the participant has read its welcome can miss it.
func (p *Participant) Start(src Source) {
	p.source = src
	p.started.Store(true)
	p.wakeWriter()
}

// Close ends the connection now with code, dropping what is queued; a
// write under way is finished first, so that the close frame never cuts a
// message. It returns at once; the closing handshake runs in the
// background.
func (p *Participant) Close(code websocket.StatusCode, reason string) {
	if p.cut.Swap(true) {
		return
	}
	p.queue.Close()
	reason = closeReason(reason) // for a longer reason the library sends no close frame at all
	go func() {
		p.closeHandshake(code, reason)
		p.finish()
	}()
}

// CloseAfterDrain lets the writer send what is queued, then close with
// code. Further deliveries are refused, answers are queued until then.
func (p *Participant) CloseAfterDrain(code websocket.StatusCode, reason string) {
	p.drain.CompareAndSwap(nil, &closeFrame{code, closeReason(reason)})
	p.queue.Drain()
	p.wakeWriter()
}

// closeHandshake closes the connection with code and reason, waiting for
// the peer's close frame as the library does.
func (p *Participant) closeHandshake(code websocket.StatusCode, reason string) {
	if p.nc == nil {
		_ = p.conn.Close(code, reason)
		return
	}
	p.nc.CloseHandshake(func() { _ = p.conn.Close(code, reason) })
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
	p.closeOnce.Do(func() { close(p.done) })
}

// Watch is called periodically (every second) by the gateway: it cuts a
// connection whose write has taken longer than WriteTimeout, and lets an
// idle writer goroutine, and an idle queue's grown ring, go. One watcher
// for all connections replaces a timer per write and a goroutine per
// connection.
func (p *Participant) Watch(now time.Time) {
	if start := p.writeStart.Load(); start != 0 && p.opts.WriteTimeout > 0 && now.UnixNano()-start > int64(p.opts.WriteTimeout) {
		p.cutFor(CutWriteTimeout)
		p.Kill()
		return
	}
	if w := p.writes.Load(); w != p.seen {
		p.seen = w
		return
	}
	// Idle since the last Watch: a ring a burst grew goes back now, not
	// after each write (a connection sent bursts would grow it again for
	// each one, three or four allocations a burst).
	p.queue.shrink()
	if p.writerOn.Load() {
		select {
		case p.park <- struct{}{}:
		default:
		}
	}
}

// defaultPingTimeout is how long a ping waits for its pong when Options
// sets no WriteTimeout.
const defaultPingTimeout = 30 * time.Second

// Ping sends a WebSocket ping in the background; a peer that does not
// answer within WriteTimeout (defaultPingTimeout without one) is dropped.
// A connection being written to is not pinged: its writes show whether it
// is alive (Watch cuts one that stalls), and the library gives a control
// frame only 5 seconds, so a ping stuck behind a slow reader's backlog
// would cut a reader that is still making progress.
func (p *Participant) Ping() {
	if p.cut.Load() || p.writerOn.Load() || p.queue.Len() > 0 || !p.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.pinging.Store(false)
		timeout := p.opts.WriteTimeout
		if timeout <= 0 {
			timeout = defaultPingTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := p.conn.Ping(ctx); err != nil {
			select {
			case <-p.done:
			default:
				p.cutFor(CutPingTimeout)
				p.Kill()
			}
		}
	}()
}

// closeReason fits s in the 123 bytes a close frame has for its reason:
// a longer one is cut to at most 120 bytes, never within a character, and
// ends in "...".
func closeReason(s string) string {
	if len(s) <= 123 {
		return s
	}
	s = s[:120]
	for len(s) > 0 && s[len(s)-1]&0xc0 == 0x80 {
		s = s[:len(s)-1] // not in the middle of a character
	}
	if len(s) > 0 && s[len(s)-1] >= 0xc0 {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// popLists hold the messages one write pops from the queue: at most
// maxBatchItems, so that popping into one never grows it.
var popLists = sync.Pool{New: func() any { l := make([][]byte, 0, maxBatchItems); return &l }}

// putPopList gives a list back, holding no message.
func putPopList(list *[][]byte) {
	clear((*list)[:cap(*list)])
	popLists.Put(list)
}

func (p *Participant) writeLoop() {
	list := popLists.Get().(*[][]byte)
	defer putPopList(list)
	items := *list
	for {
		if err := p.writeRest(); err != nil {
			p.Kill()
			return
		}
		for !p.cut.Load() {
			if p.source != nil {
				var err error
				items, err = p.source.Next(items[:0], maxBatchItems, maxBatchBytes)
				if err != nil {
					p.Close(StatusInternalError, closeReason(err.Error()))
					return
				}
				if len(items) == 0 {
					p.source = nil
				}
			}
			if p.source == nil {
				if p.flushDue.Load() && p.drain.Load() == nil {
					if n, bytes := p.queue.Size(); n < maxBatchItems && bytes < maxBatchBytes {
						break // the burst under way flushes again at its end
					}
				}
				items = p.queue.PopUpTo(items[:0], maxBatchItems, maxBatchBytes)
			}
			if len(items) == 0 {
				break
			}
			msgs, err := p.write(items, p.filter.Load().Batch)
			if err != nil {
				p.Kill()
				return
			}
			if p.opts.OnWrite != nil {
				p.opts.OnWrite(msgs)
			}
			clear(items)
		}
		if cf := p.drain.Load(); cf != nil && p.queue.Len() == 0 && !p.cut.Swap(true) {
			p.closeHandshake(cf.code, cf.reason)
			p.finish()
			return
		}
		select {
		case <-p.queue.ready:
		case <-p.done:
			return
		case <-p.park:
			// Idle since the last Watch: let the goroutine go, unless
			// something was queued meanwhile.
			p.queue.compact()
			p.writerOn.Store(false)
			if p.queue.Len() == 0 && p.drain.Load() == nil || !p.writerOn.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

// write sends the queued bodies, each as a text frame, in one Write:
// what queued up while the previous write was on its way goes out
// together, with no timer and so no added latency. With batch (and more
// than one) it sends them as one message instead, a line each. It reports how
// many WebSocket messages it wrote. There is no per-write timer: Watch
// cuts a write that outlasts WriteTimeout.
func (p *Participant) write(frames [][]byte, batch bool) (int, error) {
	msgs, bp := p.frame(frames, batch)
	p.writeStart.Store(time.Now().UnixNano())
	p.writes.Add(1)
	_, err := p.nc.Write(*bp)
	p.writeStart.Store(0)
	putWriteBuffer(bp)
	return msgs, err
}

// writeRest writes what writeNow left, the write timeout running.
func (p *Participant) writeRest() error {
	p.writeStart.Store(time.Now().UnixNano())
	err := p.nc.writeRest()
	p.writeStart.Store(0)
	return err
}

// frame puts the queued bodies into one buffer of writeBuffers as the
// text frames write sends (one for all of them with batch, their lines
// joined by newlines), and says how many WebSocket messages that is.
func (p *Participant) frame(bodies [][]byte, batch bool) (int, *[]byte) {
	bp := writeBuffers.Get().(*[]byte)
	buf := (*bp)[:0]
	msgs := len(bodies)
	if batch && len(bodies) > 1 {
		n := len(bodies) - 1
		for _, b := range bodies {
			n += len(b)
		}
		buf = AppendTextHeader(buf, n)
		for i, b := range bodies {
			if i > 0 {
				buf = append(buf, '\n')
			}
			buf = append(buf, b...)
		}
		msgs = 1
	} else {
		for _, b := range bodies {
			buf = append(AppendTextHeader(buf, len(b)), b...)
		}
	}
	*bp = buf
	return msgs, bp
}
