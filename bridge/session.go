package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is one connection to the MCP server, from its initialize
// handshake to its end: the process exited, the connection failed, a
// ping went unanswered, or the bridge closed it.
type session struct {
	b      *Bridge
	conn   mcp.Connection
	ctx    context.Context // ended with the session
	cancel context.CancelFunc

	// initResult is the server's answer to initialize, as it came (for a
	// server of MCP 2026-07-28, what its server/discover said, in that
	// shape); serverCapabilities are its capabilities; describe names the
	// server and its protocol version, for the log.
	initResult         json.RawMessage
	serverCapabilities json.RawMessage
	describe           string
	// version is the protocol version the server chose (for the
	// Streamable HTTP transport's header).
	version *atomic.Value
	// modern: the server speaks MCP 2026-07-28 (handshake.go): no
	// initialize, and every request carries triple in its params._meta.
	modern bool
	triple map[string]json.RawMessage
	// hc makes the requests of a Streamable HTTP session (nil for
	// others): its event stream (events.go); streams says which call's
	// stream carried each request of the server (streams.go).
	hc      *http.Client
	streams *streamCalls

	mu      sync.Mutex
	waiters map[int64]chan *jsonrpc.Response // the bridge's own requests (initialize, ping)

	endOnce sync.Once
	done    chan struct{} // closed when the session has ended
	err     error         // why, set before done closes
}

// ended reports whether the session has ended.
func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// end ends the session for err: the first cause wins.
func (s *session) end(err error) {
	s.endOnce.Do(func() {
		s.err = err
		close(s.done)
		s.cancel()
	})
}

// startSession connects to the server and makes the initialize
// handshake; the session then reads the server until it ends.
func (b *Bridge) startSession(ctx context.Context) (*session, error) {
	version, streams := &atomic.Value{}, newStreamCalls()
	t, hc := b.transport(version, streams)
	sctx, cancel := context.WithCancel(ctx)
	conn, err := t.Connect(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("connecting to the MCP server: %w", err)
	}
	s := &session{
		b: b, conn: conn, ctx: sctx, cancel: cancel, version: version, hc: hc, streams: streams,
		waiters: map[int64]chan *jsonrpc.Response{},
		done:    make(chan struct{}),
	}
	go s.read()
	if err := s.handshake(); err != nil {
		s.end(err)
		s.close()
		return nil, err
	}
	if hc != nil && !s.modern {
		go s.listen() // the event stream, which MCP 2026-07-28 has not
	}
	go s.keepalive()
	return s, nil
}

// call makes one of the bridge's own requests and waits for its answer.
func (s *session) call(ctx context.Context, method string, params json.RawMessage) (*jsonrpc.Response, error) {
	n := s.b.nextNumber()
	ch := make(chan *jsonrpc.Response, 1)
	s.mu.Lock()
	s.waiters[n] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, n)
		s.mu.Unlock()
	}()
	if err := s.conn.Write(ctx, &jsonrpc.Request{ID: serverID(n), Method: method, Params: params}); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-s.done:
		return nil, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read reads what the server sends until the connection fails.
func (s *session) read() {
	for {
		msg, err := s.conn.Read(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				err = fmt.Errorf("reading from the MCP server: %w", err)
			}
			s.end(err)
			return
		}
		s.handle(msg)
	}
}

// handle takes one message of the server: an answer (to a requester, or
// to the bridge itself), a request of its client, or a notification.
func (s *session) handle(msg jsonrpc.Message) {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		n, ok := callNumber(m.ID)
		if !ok {
			s.b.cfg.Logf("the MCP server answered a request the bridge did not make (id %v)", m.ID.Raw())
			return
		}
		s.mu.Lock()
		ch := s.waiters[n]
		s.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default: // a second answer to one request: the first counts
			}
			return
		}
		s.b.answered(n, m)
	case *jsonrpc.Request:
		if m.IsCall() {
			go s.answerServerRequest(m)
			return
		}
		s.b.notified(s, m)
	}
}

// write sends msg to the server. A write that fails because the
// server is gone (a stdio server's pipe, a Streamable HTTP server that
// does not answer or no longer knows the session) ends the session. A
// Streamable HTTP server may also refuse one message with an HTTP error
// status: the session goes on, and the error is a *refusal, carrying
// the server's JSON-RPC error when its answer had one.
func (s *session) write(ctx context.Context, msg jsonrpc.Message) error {
	err := s.conn.Write(ctx, msg)
	if err == nil || s.ctx.Err() != nil || ctx.Err() != nil {
		return err
	}
	if s.hc != nil && !errors.Is(err, mcp.ErrSessionMissing) && !errors.As(err, new(*url.Error)) {
		r := &refusal{err: err}
		if we := (*jsonrpc.Error)(nil); errors.As(err, &we) && !transportMarker(we) {
			r.rpc = we
		}
		return r
	}
	s.end(fmt.Errorf("writing to the MCP server: %w", err))
	return err
}

// refusal is a Streamable HTTP server's refusal of one message.
type refusal struct {
	err error
	rpc *jsonrpc.Error // the JSON-RPC error of the server's answer, if it had one
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// transportMarker reports whether e is the SDK's mark of an error of its
// Streamable HTTP transport (jsonrpc2.ErrRejected, which the SDK wraps
// around the transport's own errors and which package jsonrpc does not
// export) rather than an error the server sent.
func transportMarker(e *jsonrpc.Error) bool {
	return e.Code == -32005 && e.Message == "rejected by transport"
}

// keepalive pings the server while the session lasts, and ends it when a
// ping goes unanswered: a server that stopped answering is restarted as
// one that exited. Any answer will do, an error too.
func (s *session) keepalive() {
	t := time.NewTicker(s.b.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.b.cfg.PingTimeout)
		method := "ping"
		if s.modern {
			method = "server/discover" // MCP 2026-07-28 has no ping
		}
		_, err := s.call(ctx, method, s.withTriple(nil))
		cancel()
		if err != nil && s.ctx.Err() == nil {
			s.end(fmt.Errorf("the MCP server did not answer a ping within %v: %w", s.b.cfg.PingTimeout, err))
			return
		}
	}
}

// close closes the connection: for a command, its standard input, then
// SIGTERM and SIGKILL if it does not exit (mcp.CommandTransport); for
// Streamable HTTP, a DELETE of the session.
func (s *session) close() {
	s.end(errors.New("closed"))
	_ = s.conn.Close()
}
