package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/wire"
)

// Tasks of the pod's MCP servers on /mcp (docs/protocol.md section 9):
// MCP 2025-11-25's task-augmented tools/call (params.task) of a server's
// tool returns the task the server made, and tasks/get, tasks/result,
// tasks/list and tasks/cancel reach the server that holds it. The task
// ids a host sees say whose they are, as tool names do: SERVER__TASK,
// each part with the bytes outside [A-Za-z0-9.-] written _HH ("_" too),
// so that the first "__" ends the server and both parts read back
// exactly. The official Go SDK this endpoint is built on has no tasks, so
// these requests are answered here, before the SDK, on the host's session
// (or without one, in 2026-07-28's stateless way), as application/json.
// Each is the host's participant's mcp/request through the pod, governed
// as its tool calls are; a question the server asks while the host waits
// for a task's result (the task is input_required) reaches the host on its
// session's event stream (elicitation/create), or is answered for it
// (method not found) when it has none or did not declare elicitation.

// taskRequest reports whether body is a request the task handler answers,
// and reads it.
func taskRequest(body []byte) (method string, ok bool) {
	r := gjson.GetManyBytes(body, "method", "params.task", "params.name", "id")
	if !r[3].Exists() {
		return "", false
	}
	switch method = r[0].Str; method {
	case "tools/call":
		return method, r[1].Exists() && strings.Contains(r[2].Str, "__")
	case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
		return method, true
	}
	return "", false
}

// peekTask reads the body of a POST from member m and answers it when it
// is a task request; it reports whether it did, and otherwise leaves the
// body to be read again.
func (e *Endpoint) peekTask(w http.ResponseWriter, r *http.Request, m *member) bool {
	limit := int64(e.g.Node.Config.MaxMessageBytes) + 64<<10
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || int64(len(body)) > limit {
		return false // the SDK refuses it
	}
	method, ok := taskRequest(body)
	if !ok {
		return false
	}
	id := json.RawMessage(gjson.GetBytes(body, "id").Raw)
	params := json.RawMessage(gjson.GetBytes(body, "params").Raw)
	result, rpcErr := e.task(r.Context(), m, r.Header.Get(sessionHeader), method, params)
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if rpcErr != nil {
		resp["error"] = rpcErr
	} else {
		resp["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
	return true
}

// task answers one task request of m.
func (e *Endpoint) task(ctx context.Context, m *member, sid, method string, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	switch method {
	case "tools/call":
		exposed := gjson.GetBytes(params, "name").Str
		m.toolsMu.Lock()
		st, ok := m.tools[exposed]
		m.toolsMu.Unlock()
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no tool %q of the pod's MCP servers is yours to call", exposed)}
		}
		p, _ := object(params)
		p["name"] = json.RawMessage(fmt.Sprintf("%q", st.name))
		return e.relayTask(ctx, m, sid, st.server, method, p)
	case "tasks/list":
		var all []json.RawMessage
		for _, server := range m.toolServers() {
			res, rpcErr := e.relayTask(ctx, m, sid, server, method, map[string]json.RawMessage{})
			if rpcErr != nil {
				continue // a server without tasks lists none
			}
			for _, t := range gjson.GetBytes(res, "tasks").Array() {
				all = append(all, json.RawMessage(t.Raw))
			}
		}
		if all == nil {
			all = []json.RawMessage{}
		}
		out, _ := json.Marshal(map[string]any{"tasks": all})
		return out, nil
	}
	server, task, ok := readTaskID(gjson.GetBytes(params, "taskId").Str)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "taskId is not a task of the pod's MCP servers (SERVER__TASK, as the task-augmented call returned it)"}
	}
	p, _ := object(params)
	p["taskId"] = json.RawMessage(fmt.Sprintf("%q", task))
	return e.relayTask(ctx, m, sid, server, method, p)
}

// object reads a JSON object's members, raw.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return map[string]json.RawMessage{}, false
	}
	return m, true
}

// toolServers are the servers whose tools m lists.
func (m *member) toolServers() []string {
	m.toolsMu.Lock()
	defer m.toolsMu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, st := range m.tools {
		if !seen[st.server] {
			seen[st.server] = true
			out = append(out, st.server)
		}
	}
	return out
}

// relayTask sends method with params to server as m's participant's
// mcp/request, waits for the answer (passing the host the server's
// questions meanwhile), and returns its result with the task ids the
// host's, or its error.
func (e *Endpoint) relayTask(ctx context.Context, m *member, sid, server, method string, params map[string]json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	payload, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": uuid.NewString(), "method": method, "params": params})
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	out := outgoing{ID: uuid.NewString(), Kind: wire.KindMCPRequest, To: []string{server}, Payload: payload, Trace: traceField(ctx)}
	if cx := m.branch(); cx != "" {
		out.Context = wire.Context{ID: cx}.JSON()
	}
	wait := m.pod.Await(out.ID, m.id)
	if _, err := m.relay(out); err != nil {
		m.pod.Forget(out.ID, wait)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "the gateway refused the request: " + err.Error()}
	}
	defer m.pod.Forget(out.ID, wait)
	for {
		select {
		case body := <-wait:
			kind := gjson.GetBytes(body, "kind").Str
			switch {
			case wire.IsMCPResponse(kind):
				p := gjson.GetBytes(body, "payload")
				if e := p.Get("error"); e.Exists() {
					var we jsonrpc.Error
					_ = json.Unmarshal([]byte(e.Raw), &we)
					return nil, &we
				}
				return hostTaskIDs(server, json.RawMessage(p.Get("result").Raw)), nil
			case wire.IsMCPRequest(kind):
				e.taskQuestion(ctx, m, sid, body)
			}
		case <-ctx.Done():
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: ctx.Err().Error()}
		case <-m.done:
			return nil, errSessionEnded
		}
	}
}

// taskQuestion passes a server's question, asked while the host waits for
// a task of it, to the host's session sid on its event stream; without
// one that hears it, the gateway answers it for the host.
func (e *Endpoint) taskQuestion(ctx context.Context, m *member, sid string, body []byte) {
	r := gjson.GetManyBytes(body, "id", "from", "payload.id", "payload.method", "payload.params")
	if !r[2].Exists() {
		return
	}
	q := &hostQuestion{envID: r[0].Str, from: r[1].Str, rpcID: json.RawMessage(r[2].Raw), method: r[3].Str, params: json.RawMessage(r[4].Raw)}
	var params mcp.ElicitParams
	ss := m.session(sid)
	if q.method != "elicitation/create" || json.Unmarshal(q.params, &params) != nil || ss == nil ||
		ss.InitializeParams() == nil || !elicits(ss.InitializeParams().Capabilities, params.Mode) {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeMethodNotFound, wire.MCPReasonHostCannotAnswer, "Method not found")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.g.Node.Config.MCPRequestTimeout)
	defer cancel()
	res, err := ss.Elicit(ctx, &params)
	if err != nil {
		m.pod.AnswerFor(q.envID, m.id, jsonrpc.CodeInternalError, wire.MCPReasonHostCannotAnswer, "the MCP host's session could not be asked: "+err.Error())
		return
	}
	e.answerQuestion(&hostCall{m: m}, q, res)
}

// session is the member's MCP session of id sid, or nil.
func (m *member) session(sid string) *mcp.ServerSession {
	if sid == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ss := range m.sessions {
		if ss.ID() == sid {
			return ss
		}
	}
	return nil
}

// hostTaskIDs returns a server's result with each taskId in it (a task's,
// a task list's, a task result's related-task) written as the host sees
// it: SERVER__TASK.
func hostTaskIDs(server string, result json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(result))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return result
	}
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			for k, val := range t {
				if s, ok := val.(string); ok && k == "taskId" {
					t[k] = taskExposed(server, s)
					continue
				}
				walk(val)
			}
		case []any:
			for _, val := range t {
				walk(val)
			}
		}
	}
	walk(v)
	out, err := json.Marshal(v)
	if err != nil {
		return result
	}
	return out
}

// taskExposed is the host's id of task of server.
func taskExposed(server, task string) string {
	var b strings.Builder
	escapeID(&b, server)
	b.WriteString("__")
	escapeID(&b, task)
	return b.String()
}

// escapeID writes s with the bytes outside [A-Za-z0-9.-] as _HH.
func escapeID(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(b, "_%02x", c)
		}
	}
}

// readTaskID reads a host's task id back: the server and its task.
func readTaskID(exposed string) (server, task string, ok bool) {
	s, t, found := strings.Cut(exposed, "__")
	if !found {
		return "", "", false
	}
	server, ok1 := unescapeID(s)
	task, ok2 := unescapeID(t)
	return server, task, ok1 && ok2 && server != "" && task != ""
}

// unescapeID reads what escapeID wrote.
func unescapeID(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '_' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		c, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String(), true
}
