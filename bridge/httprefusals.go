package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A Streamable HTTP server may refuse one POSTed message with an HTTP
// error status and a body of plain text: the Go SDK's server answers a
// method it does not know with 400 and its reason. The SDK's client
// transport takes such an answer for the end of the connection, and the
// bridge would then restart its session for every request a requester
// got wrong: one requester could keep the server away from everyone.
// refusalAnswers turns that answer, for a request, into the JSON-RPC
// error answer it stands for, under the request's id, which reaches the
// requester as the server's answer; the session goes on. A status that
// says the session or the authorization is gone (401, 403, 404) and one
// that says to wait (429) are left as they are, and so is an answer
// whose body is already a JSON-RPC message.
type refusalAnswers struct{ base http.RoundTripper }

// maxRefusalText bounds the server's text quoted in the error's message.
const maxRefusalText = 512

func (t refusalAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || resp.StatusCode < 400 || resp.StatusCode >= 500 {
		return resp, err
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusTooManyRequests:
		return resp, nil
	}
	id, ok := requestID(r)
	if !ok {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalText))
	resp.Body.Close()
	if _, err := jsonrpc.DecodeMessage(body); err == nil {
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	text := strings.TrimSpace(string(body))
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	answer := errorAnswer(id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("the MCP server refused the request (HTTP %d): %s", resp.StatusCode, text), nil)
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(answer)),
		ContentLength: int64(len(answer)),
		Request:       r,
	}, nil
}

// requestID is the JSON-RPC id of the request r POSTs, when it is one
// request (not a notification or a response).
func requestID(r *http.Request) (json.RawMessage, bool) {
	if r.GetBody == nil {
		return nil, false
	}
	rc, err := r.GetBody()
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(rc).Decode(&m) != nil || m.Method == "" || !validID(m.ID) {
		return nil, false
	}
	return m.ID, true
}
