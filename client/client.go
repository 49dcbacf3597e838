package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/wire"
)

// Defaults of Options, each used when its field is zero.
const (
	// DefaultDialTimeout bounds each dial of a reconnection, up to the
	// welcome (Dial itself is bounded by its context and this).
	DefaultDialTimeout = 10 * time.Second
	// DefaultEventBuffer is how many events the client reads ahead of
	// Next. When they are not taken, the client stops reading, and the
	// gateway cuts a connection that falls send_queue envelopes behind
	// (4008): the buffer smooths bursts, it does not hide a slow reader.
	DefaultEventBuffer = 1024
	// DefaultReadLimit is the largest WebSocket message read: a batch of
	// up to 256 envelopes of up to twice the default 1 MiB limit fits.
	DefaultReadLimit = 64 << 20
	// DefaultMinDelay and DefaultMaxDelay bound the wait before each
	// reconnection attempt: it doubles from the first to the second, with
	// jitter (each wait is drawn between half of it and all of it), so
	// that the participants of a gateway that restarts do not all come
	// back at once.
	DefaultMinDelay = 100 * time.Millisecond
	DefaultMaxDelay = 10 * time.Second
)

// HistoryAll as Options.History asks for all of the pod's history.
const HistoryAll = -1

// Options says which pod to join, as whom, and how.
type Options struct {
	// Pod is the pod to join (required).
	Pod string
	// Participant is the participant id to join as, in open mode (a
	// gateway without a token file); empty lets the gateway make one up.
	// With a token file the token names the participant.
	Participant string
	// Token is sent as Authorization: Bearer TOKEN.
	Token string
	// Filter is the filter to join with (docs/protocol.md section 4),
	// sent as query parameters; nil (or a zero Filter) admits
	// everything. Fields left nil or empty keep the gateway's default.
	// Change it later with SetFilter; a reconnection keeps the filter in
	// effect when the connection was lost.
	Filter *wire.Filter
	// History asks for the pod's past right after the welcome: the last
	// History envelopes that the filter admits, folded (0: none;
	// HistoryAll: all of it). Only the first connection asks for it;
	// reconnections resume instead.
	History int
	// Fold set to false asks for that history unfolded and uncollapsed
	// (fold=0); nil or true leaves it folded, the gateway's default.
	Fold *bool
	// Resume is the id of the last envelope a previous client received:
	// the gateway replays what came after it (docs/protocol.md section
	// 8). The welcome's History says whether it could (Resumed).
	Resume string
	// Protocol is wire.ProtocolMCPP (the default) or wire.ProtocolMCPX;
	// the gateway writes to an MCPx participant in MCPx.
	Protocol string
	// Serves says what the participant answers requests of
	// (wire.ServesMCP: it is an MCP server, as mcpp bridge is); the
	// gateway shows it in the participant's identity, in welcomes and
	// presence events.
	Serves []string
	// Observe joins without being present (observe=1): no presence event,
	// no place in welcomes or participant lists. It needs the
	// gateway/observe capability (wire.CapabilityObserve).
	Observe bool
	// HTTPHeader is added to the upgrade request.
	HTTPHeader http.Header
	// HTTPClient makes the upgrade request; nil is http.DefaultClient.
	HTTPClient *http.Client
	// TLSConfig checks a wss:// (or https://) gateway's certificate in
	// place of Go's defaults (the system's roots, or those of
	// SSL_CERT_FILE and SSL_CERT_DIR when set): set its RootCAs to trust
	// a private CA (see "TLS" in the package's documentation). It is for
	// the client's own transport, so HTTPClient must then be nil.
	TLSConfig *tls.Config
	// Reconnect says what to do when the connection is lost.
	Reconnect Reconnect
	// DialTimeout bounds each dial up to the welcome (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// EventBuffer is how many events are read ahead of Next (default
	// DefaultEventBuffer).
	EventBuffer int
	// ReadLimit is the largest WebSocket message read (default
	// DefaultReadLimit).
	ReadLimit int64
}

// Reconnect says what the client does when its connection is lost. It
// reconnects by default, except after Close, 4000 (replaced: another
// connection took the participant id), 4401 (token expired), 4403
// (revoked) and 4410 (kicked). Attempts wait MinDelay,
// then twice as long each time up to MaxDelay, with jitter. A refusal that
// will not change (400, 401, 403) ends the client at once.
type Reconnect struct {
	// Disable ends the client when its connection is lost.
	Disable bool
	// MinDelay is the wait before the first attempt (default
	// DefaultMinDelay).
	MinDelay time.Duration
	// MaxDelay bounds the wait between attempts (default
	// DefaultMaxDelay).
	MaxDelay time.Duration
	// MaxAttempts ends the client after this many failed attempts in a
	// row; 0 tries until Close.
	MaxAttempts int
	// Report, when set, is told what reconnecting goes through, for a
	// user to see while the connection is down: attempt 0 with why the
	// connection was lost, then each attempt that fails with its number
	// and why. The *Reconnected event says when one succeeds. It is called
	// on the client's own goroutine, and must return quickly.
	Report func(attempt int, err error)
}

// Client is one participant in one pod: a WebSocket connection to the
// gateway, and the reconnections that keep it. Its methods may be called
// from several goroutines at once.
type Client struct {
	opts   Options
	base   *url.URL // the upgrade URL with pod, participant and protocol
	header http.Header
	secret string // a token given in the URL's query, hidden from errors

	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	events chan Event
	done   chan struct{} // closed when the client has ended

	mu      sync.Mutex
	cur     *conn         // the live connection, nil while reconnecting
	ready   chan struct{} // closed once cur is set
	err     error         // why the client ended, set before done closes
	closed  bool          // Close was called
	welcome wire.Welcome
	filter  wire.Filter                    // in effect, for a reconnection
	pending map[string]chan *wire.Envelope // requests waiting, by id
	resent  map[string]struct{}            // envelopes sent again after a lost connection

	// Read by the run goroutine alone.
	resumeID string // the last envelope handed out that history keeps
	lastID   string // the last envelope handed out

	reads atomic.Int64 // WebSocket messages read, for the tests
}

// conn is one WebSocket connection of a client.
type conn struct {
	*Conn
	down chan struct{} // closed when reading it stopped
	err  error         // why, set before down closes
}

// Dial joins a pod: it upgrades to WebSocket at url (the gateway's /ws
// endpoint: ws://HOST:PORT/ws; ws://HOST:PORT, http:// and https:// do
// too) and waits for the welcome, which is then the first event. ctx
// bounds the dial alone, not the client's life: end that with Close.
//
// A refused upgrade is a *RefusedError carrying the HTTP status and the
// gateway's code. Dial does not retry: reconnection starts once a
// connection has been made.
func Dial(ctx context.Context, url string, opts Options) (*Client, error) {
	base, secret, err := baseURL(url, &opts)
	if err != nil {
		return nil, err
	}
	// One transport for every connection of the client, and its
	// reconnections.
	if opts.HTTPClient, err = tlsClient(opts.HTTPClient, opts.TLSConfig); err != nil {
		return nil, fmt.Errorf("client: dial pod %s: %w", opts.Pod, err)
	}
	opts.DialTimeout = orDefault(opts.DialTimeout, DefaultDialTimeout)
	opts.EventBuffer = orDefault(opts.EventBuffer, DefaultEventBuffer)
	opts.ReadLimit = orDefault(opts.ReadLimit, DefaultReadLimit)
	opts.Reconnect.MinDelay = orDefault(opts.Reconnect.MinDelay, DefaultMinDelay)
	opts.Reconnect.MaxDelay = max(orDefault(opts.Reconnect.MaxDelay, DefaultMaxDelay), opts.Reconnect.MinDelay)
	c := &Client{
		opts: opts, base: base, secret: secret,
		header:   upgradeHeader(&opts),
		events:   make(chan Event, opts.EventBuffer),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		pending:  map[string]chan *wire.Envelope{},
		resent:   map[string]struct{}{},
		resumeID: opts.Resume,
	}
	if opts.Filter != nil {
		c.filter = *opts.Filter
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())

	cn, wm, rest, err := c.connect(ctx, c.opts.Resume, true)
	if err != nil {
		c.cancel()
		return nil, fmt.Errorf("client: dial pod %s: %w", opts.Pod, err)
	}
	c.mu.Lock()
	c.cur, c.welcome, c.filter = cn, wm.w, wm.w.Filter
	close(c.ready)
	c.mu.Unlock()
	c.events <- &Welcome{Envelope: wm.env, Welcome: wm.w, Raw: wm.raw}
	go c.run(cn, rest)
	return c, nil
}

// baseURL is the upgrade URL with what every connection of the client
// sends, and the token given in its query, if any; options without a pod
// have none.
func baseURL(raw string, o *Options) (*url.URL, string, error) {
	if o.Pod == "" {
		return nil, "", errors.New("client: Options.Pod is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("client: the gateway's URL: %w", err)
	}
	if err := wire.AsWebSocket(u); err != nil {
		return nil, "", fmt.Errorf("client: %w", err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = wire.PathWS
	}
	q := u.Query()
	secret := q.Get(wire.QueryToken)
	q.Set(wire.QueryPod, o.Pod)
	if o.Participant != "" {
		q.Set(wire.QueryParticipant, o.Participant)
	}
	if o.Protocol != "" {
		q.Set(wire.QueryProtocol, o.Protocol)
	}
	if len(o.Serves) > 0 {
		q.Set(wire.QueryServes, strings.Join(o.Serves, ","))
	}
	if o.Observe {
		q.Set(wire.QueryObserve, "1")
	}
	u.RawQuery = q.Encode()
	return u, secret, nil
}

// dialURL is the URL of one connection: the filter in effect, what to
// resume after, and on the first the history asked for.
func (c *Client) dialURL(resume string, first bool) string {
	c.mu.Lock()
	filter, base := c.filter.Query(), c.base // Refresh may replace base
	c.mu.Unlock()
	history := 0
	if first {
		history = c.opts.History
	}
	return connURL(base, filter, resume, history, c.opts.Fold)
}

// welcomeMsg is the welcome of one connection.
type welcomeMsg struct {
	env *wire.Envelope
	w   wire.Welcome
	raw []byte // as the gateway sent it
}

// connect makes one connection and reads its welcome. It returns the
// lines that came in the welcome's message after it (with batch=1).
func (c *Client) connect(ctx context.Context, resume string, first bool) (*conn, *welcomeMsg, [][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	c.mu.Lock()
	header, secret := c.header, c.secret // Refresh replaces them
	c.mu.Unlock()
	cn, err := dialConn(ctx, c.dialURL(resume, first), header, &c.opts, secret)
	if err != nil {
		return nil, nil, nil, err
	}
	data, err := cn.Read(ctx, nil)
	if err != nil {
		_ = cn.CloseNow()
		if ctx.Err() != nil {
			return nil, nil, nil, fmt.Errorf("no welcome from the gateway: %w", ctx.Err())
		}
		return nil, nil, nil, fmt.Errorf("no welcome from the gateway: %w", err)
	}
	c.reads.Add(1)
	lines := splitLines(data)
	var env wire.Envelope
	var w wire.Welcome
	if len(lines) == 0 || json.Unmarshal(lines[0], &env) != nil ||
		env.Kind != wire.KindWelcome || env.DecodePayload(&w) != nil {
		_ = cn.CloseNow()
		return nil, nil, nil, fmt.Errorf("the first message is not a system/welcome: %.200q", data)
	}
	return &conn{Conn: cn, down: make(chan struct{})}, &welcomeMsg{env: &env, w: w, raw: lines[0]}, lines[1:], nil
}

// splitLines splits a WebSocket message into its envelopes: one, or
// several, one per line, with batch=1.
func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(line)) > 0 {
			out = append(out, line)
		}
	}
	return out
}

// run reads the connection, and the next after it is lost, until the
// client ends.
func (c *Client) run(cn *conn, rest [][]byte) {
	defer close(c.done)
	for {
		c.read(cn, rest)
		c.mu.Lock()
		c.cur = nil
		c.ready = make(chan struct{})
		closed := c.closed
		c.mu.Unlock()
		if closed {
			c.end(ErrClosed)
			return
		}
		cause := closeError(cn.err)
		if c.opts.Reconnect.Disable || final(cause) {
			c.end(cause)
			return
		}
		var err error
		cn, rest, err = c.reconnect(cause)
		if err != nil {
			c.end(err)
			return
		}
	}
}

// end ends the client with err.
func (c *Client) end(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.events)
}

// read hands out what one connection receives until it ends.
func (c *Client) read(cn *conn, rest [][]byte) {
	defer close(cn.down)
	for _, line := range rest {
		if !c.dispatch(line) {
			cn.err = ErrClosed
			_ = cn.CloseNow()
			return
		}
	}
	for {
		data, err := cn.Read(context.Background(), nil)
		if err != nil {
			cn.err = err
			return
		}
		c.reads.Add(1)
		for _, line := range splitLines(data) {
			if !c.dispatch(line) {
				cn.err = ErrClosed
				_ = cn.CloseNow()
				return
			}
		}
	}
}

// dispatch hands one received envelope to whoever waits for it: a
// request, or the user as an event. It returns false when the client is
// closing.
func (c *Client) dispatch(line []byte) bool {
	env := &wire.Envelope{}
	if err := json.Unmarshal(line, env); err != nil {
		return true // the gateway writes JSON objects; nothing to hand out
	}
	if env.From == wire.GatewayID && len(env.CorrelationID) > 0 && c.answer(env) {
		return true
	}
	switch env.Kind {
	case wire.KindPresence:
		ev := &Presence{Envelope: env, Raw: line}
		if env.DecodePayload(&ev.Presence) == nil {
			return c.emit(ev)
		}
	case wire.KindError:
		ev := &GatewayError{Envelope: env, Raw: line}
		if env.DecodePayload(&ev.ErrorPayload) == nil {
			if ev.Code == wire.CodeDuplicateID && c.wasResent(ev.RefusedID()) {
				return true // the first try got through
			}
			return c.emit(ev)
		}
	case wire.KindWelcome:
		ev := &Welcome{Envelope: env, Raw: line}
		if env.DecodePayload(&ev.Welcome) == nil {
			return c.emit(ev)
		}
	case wire.KindContext:
		ev := &ContextEvent{Envelope: env, Raw: line}
		ctx, err := wire.ParseContext(env.Context)
		if err == nil && env.DecodePayload(&ev.ContextEvent) == nil {
			ev.Context = ctx
			return c.handOut(env, ev)
		}
	case wire.KindFilter:
		c.setFilter(env)
	}
	return c.handOut(env, &Message{Envelope: env, Raw: line})
}

// handOut emits an envelope of the pod, once: one whose id is the id of
// the envelope handed out right before is dropped (a resume that replays
// the envelope it resumes after would hand it out twice). It keeps the
// id of the last one history keeps, to resume after it.
func (c *Client) handOut(env *wire.Envelope, ev Event) bool {
	if env.ID != "" && env.ID == c.lastID {
		return true
	}
	if !c.emit(ev) {
		return false
	}
	c.lastID = env.ID
	if env.ID != "" && env.InHistory() {
		c.resumeID = env.ID
	}
	return true
}

func (c *Client) emit(ev Event) bool {
	select {
	case c.events <- ev:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// answer hands an answer of the gateway to the request it answers, and
// reports whether one was waiting.
func (c *Client) answer(env *wire.Envelope) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range env.CorrelationID {
		if ch, ok := c.pending[id]; ok {
			delete(c.pending, id)
			if env.Kind == wire.KindFilter {
				c.setFilterLocked(env)
			}
			ch <- env
			return true
		}
	}
	return false
}

// setFilter keeps the filter a system/filter answer says is in effect,
// for the next connection.
func (c *Client) setFilter(env *wire.Envelope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setFilterLocked(env)
}

func (c *Client) setFilterLocked(env *wire.Envelope) {
	var f wire.Filter
	if env.DecodePayload(&f) == nil {
		c.filter = f
	}
}

// maxResent bounds the ids of envelopes sent again; past it they are
// forgotten, and a duplicate_id for one comes as an event.
const maxResent = 4096

func (c *Client) markResent(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.resent) >= maxResent {
		clear(c.resent)
	}
	c.resent[id] = struct{}{}
}

func (c *Client) wasResent(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.resent[id]
	delete(c.resent, id)
	return ok
}

// reconnect dials again until it succeeds, the client is closed, the
// gateway refuses it for good, or Reconnect.MaxAttempts are spent.
func (c *Client) reconnect(cause error) (*conn, [][]byte, error) {
	r := c.opts.Reconnect
	report := func(attempt int, err error) {
		if r.Report != nil {
			r.Report(attempt, err)
		}
	}
	report(0, cause)
	last := cause
	for attempt := 0; ; attempt++ {
		if r.MaxAttempts > 0 && attempt >= r.MaxAttempts {
			return nil, nil, fmt.Errorf("gave up reconnecting after %d attempts: %w (the connection ended: %w)", attempt, last, cause)
		}
		t := time.NewTimer(backoff(r, attempt))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return nil, nil, ErrClosed
		case <-t.C:
		}
		resume := c.resumeID
		cn, wm, rest, err := c.connect(c.ctx, resume, false)
		if err != nil {
			if c.ctx.Err() != nil {
				return nil, nil, ErrClosed
			}
			var re *RefusedError
			if errors.As(err, &re) && !re.Temporary() {
				return nil, nil, fmt.Errorf("reconnecting: %w (the connection ended: %w)", err, cause)
			}
			report(attempt+1, err)
			last = err
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = cn.CloseNow()
			return nil, nil, ErrClosed
		}
		c.cur, c.welcome, c.filter = cn, wm.w, wm.w.Filter
		close(c.ready)
		c.mu.Unlock()
		w := wm.w
		resumed := resume != "" && w.History != nil && w.History.Resumed != nil && *w.History.Resumed
		ev := &Reconnected{Envelope: wm.env, Welcome: w, Raw: wm.raw, Resumed: resumed, ResumedAfter: resume, Cause: cause, Attempts: attempt + 1}
		if !c.emit(ev) {
			_ = cn.CloseNow()
			return nil, nil, ErrClosed
		}
		return cn, rest, nil
	}
}

// final reports whether a connection that ended so must not be made
// again: another took its place, or the gateway wants it gone.
func final(cause error) bool {
	for _, err := range []error{ErrReplaced, ErrTokenExpired, ErrRevoked, ErrKicked} {
		if errors.Is(cause, err) {
			return true
		}
	}
	return false
}

// backoff is the wait before attempt n (from 0): MinDelay doubled n
// times, at most MaxDelay, of which a random half is taken off.
func backoff(r Reconnect, n int) time.Duration {
	d := r.MaxDelay
	if n < 32 && r.MinDelay<<n > 0 && r.MinDelay<<n < r.MaxDelay {
		d = r.MinDelay << n
	}
	return d/2 + rand.N(d/2+1)
}

// Next returns the next event: the welcome first, then envelopes,
// presence, errors about envelopes you sent, context events, and a
// *Reconnected after a lost connection is restored. Once the client has
// ended, Next returns the events it had received, then the reason it
// ended: ErrClosed after Close, or why it could not go on (a
// *ClosedError such as 4000 replaced, or a reconnection that failed).
// Use either Next or Events, not both.
func (c *Client) Next(ctx context.Context) (Event, error) {
	select {
	case ev, ok := <-c.events:
		if !ok {
			return nil, c.Err()
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Events is Next as a channel: it delivers the same events and is closed
// when the client ends; Err then says why.
func (c *Client) Events() <-chan Event { return c.events }

// Err is why the client ended, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Welcome is the welcome of the current connection (or of the last one).
func (c *Client) Welcome() wire.Welcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.welcome
}

// ID is the participant id the gateway knows the client by.
func (c *Client) ID() string { return c.Welcome().You.ID }

// Close leaves the pod: it closes the connection with a normal closure
// (or stops reconnecting) and waits until the client has stopped. Blocked
// calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closed = true
	cn := c.cur
	c.mu.Unlock()
	c.cancel()
	if cn != nil {
		_ = cn.Close()
	}
	<-c.done
	return nil
}

// waitConn returns the live connection, waiting for a reconnection if
// there is none.
func (c *Client) waitConn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, ready, err, closed := c.cur, c.ready, c.err, c.closed
		c.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case err != nil:
			return nil, err
		case cn != nil:
			return cn, nil
		}
		select {
		case <-ready:
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
