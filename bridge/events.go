package bridge

import (
	"bufio"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A Streamable HTTP server sends what is not the answer to a request
// (its notifications: tools/list_changed, log messages; its requests of
// the client) on an event stream the client opens with a GET of the
// endpoint. The SDK's transport opens it only for a session that its own
// mcp.Client initialized, and the bridge initializes its sessions itself
// (doc.go), so the bridge opens and reads that stream here: server-sent
// events whose data is a JSON-RPC message.
//
// The stream also tells that the server went away: when it ends, the
// bridge opens it again, and a server that does not answer that, or no
// longer knows the session, ends the session, to be restarted.

const (
	// eventsReopenDelay is the wait before opening the event stream again
	// after it ended: a server may end it at any time (the client is to
	// open it again), and one that ends it at once must not be asked in a
	// tight loop.
	eventsReopenDelay = 500 * time.Millisecond
	// maxEventBytes bounds one event, as the SDK bounds one frame
	// (mcp.DefaultMaxLineLength).
	maxEventBytes = 16 << 20
	// sessionIDHeader is the Streamable HTTP transport's session header.
	sessionIDHeader = "Mcp-Session-Id"
)

// listen reads the server's event stream until the session ends.
func (s *session) listen() {
	lastID := ""
	for {
		resp, err := s.openEvents(lastID)
		if err != nil {
			if s.ctx.Err() == nil {
				s.end(fmt.Errorf("the MCP server's event stream: %w", err))
			}
			return
		}
		if resp == nil {
			return // the server offers none; pings tell whether it is there
		}
		lastID = s.readEvents(resp.Body, lastID)
		resp.Body.Close()
		select {
		case <-s.done:
			return
		case <-time.After(eventsReopenDelay):
		}
	}
}

// openEvents opens the event stream, resuming after lastID when the
// server numbers its events. It returns nil, and no error, when the
// server offers no stream (405, as the specification says, or another
// 4xx, as some servers answer).
func (s *session) openEvents(lastID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, s.b.cfg.Server.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if id := s.conn.SessionID(); id != "" {
		req.Header.Set(sessionIDHeader, id)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusOK && ct == "text/event-stream":
		return resp, nil
	case resp.StatusCode == http.StatusNotFound && s.conn.SessionID() != "":
		resp.Body.Close()
		return nil, fmt.Errorf("the server no longer knows session %s (HTTP 404)", s.conn.SessionID())
	case resp.StatusCode >= 400 && resp.StatusCode < 500, resp.StatusCode < 300:
		resp.Body.Close()
		return nil, nil
	}
	resp.Body.Close()
	return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
}

// readEvents hands each event's message to the session until the stream
// ends, and returns the id of the last event that had one.
func (s *session) readEvents(body io.Reader, lastID string) string {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" { // an event ends
			if data.Len() > 0 {
				s.event(data.String())
				data.Reset()
			}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case "id":
			lastID = value
		}
	}
	return lastID
}

// event hands one event's data to the session.
func (s *session) event(data string) {
	msg, err := jsonrpc.DecodeMessage([]byte(data))
	if err != nil {
		s.b.cfg.Logf("the MCP server's event stream sent something that is not a JSON-RPC message (%v): %.200s", err, data)
		return
	}
	s.handle(msg)
}
