package participant

import (
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

// Options are the settings of one connection: the bounds of its send
// queue and its timeouts (the gateway fills them from its configuration).
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

// Participant is one connection in one pod.
type Participant struct {
	ID  string
	Pod string
	// Protocol is what it speaks: wire.ProtocolMCPP or ProtocolMCPX.
	Protocol string
	// Since is when its connection was accepted (New), for an operator.
	Since time.Time
	// Expect are the joins of the pod's members on this node that were on
	// their way through the stream when it joined, by id, with their
	// frame numbers: its welcome listed them, and it is not told of them
	// again when they come (set and read by the pod under its lock).
	Expect map[string]uint64
	// BurstSeq is the pod fan-out's: the number of the burst (pod.Burst)
	// that last queued something for the participant, so that the burst
	// wakes its writer once.
	BurstSeq uint64
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

// RemoteAddr is the peer's address of the connection ("" when unknown).
func (p *Participant) RemoteAddr() string {
	if p.nc == nil || p.nc.Conn == nil {
		return ""
	}
	return p.nc.RemoteAddr().String()
}

// Done is closed when the participant's connection has ended.
func (p *Participant) Done() <-chan struct{} { return p.done }
