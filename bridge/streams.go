package bridge

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync"
)

// A Streamable HTTP server that asks its client something while it
// handles a call (elicitation/create) asks it on that call's stream: the
// answer to the POST that carried the call. The SDK's transport hands the
// bridge every message of every stream through one Read, and says nothing
// of where each came from; so taggedStreams reads each call's stream as it
// passes (the SDK reads it through this reader) and notes, for each
// request of the server it carries, the call whose stream it is, before
// the SDK can decode it. The session then asks that call's requester, and
// nobody else (questions.go).

// streamCalls are the requests a server made on its calls' streams, by
// the request's id (idKey), each with the bridge's number of the call
// whose stream carried it.
type streamCalls struct {
	mu    sync.Mutex
	calls map[string]int64
}

func newStreamCalls() *streamCalls { return &streamCalls{calls: map[string]int64{}} }

// maxStreamRequests bounds what streamCalls holds: a request noted and
// never handled (the session ended first) is forgotten once this many
// others came.
const maxStreamRequests = 1024

func (t *streamCalls) note(id json.RawMessage, call int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.calls) >= maxStreamRequests {
		clear(t.calls)
	}
	t.calls[idKey(id)] = call
}

// take returns the call whose stream carried the server's request of id,
// and forgets it.
func (t *streamCalls) take(id json.RawMessage) (int64, bool) {
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := idKey(id)
	n, ok := t.calls[k]
	delete(t.calls, k)
	return n, ok
}

// taggedStreams reads the event stream of each answer to a call the
// bridge POSTs (one of the bridge's numbered requests) for the server's
// requests on it.
type taggedStreams struct {
	base  http.RoundTripper
	calls *streamCalls
}

func (t taggedStreams) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
		return resp, nil
	}
	id, ok := requestID(r)
	if !ok {
		return resp, nil
	}
	n, ok := tokenNumber(id)
	if !ok {
		return resp, nil
	}
	resp.Body = &eventTee{ReadCloser: resp.Body, call: n, calls: t.calls}
	return resp, nil
}

// eventTee passes an event stream through, reading each event's data as
// it goes by for the server's requests.
type eventTee struct {
	io.ReadCloser
	call  int64
	calls *streamCalls
	line  []byte // the line read so far
	data  []byte // the event's data so far
	skip  bool   // the line is past maxEventBytes: dropped
}

func (e *eventTee) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	for _, c := range p[:n] {
		if c != '\n' {
			if len(e.line) < maxEventBytes {
				e.line = append(e.line, c)
			} else {
				e.skip = true
			}
			continue
		}
		e.endLine()
	}
	return n, err
}

// endLine takes a line of the stream: a data line adds to the event's
// data, an empty one ends the event.
func (e *eventTee) endLine() {
	line := bytes.TrimSuffix(e.line, []byte("\r"))
	e.line = e.line[:0]
	if e.skip {
		e.skip = false
		return
	}
	if len(line) == 0 {
		e.event()
		return
	}
	if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
		if len(e.data) > 0 {
			e.data = append(e.data, '\n')
		}
		e.data = append(e.data, bytes.TrimPrefix(v, []byte(" "))...)
	}
}

// event notes the request an event carries, if it is one.
func (e *eventTee) event() {
	defer func() { e.data = e.data[:0] }()
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(e.data, &m) == nil && m.Method != "" && validID(m.ID) {
		e.calls.note(m.ID, e.call)
	}
}
