package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/pod"
)

// The pod's tools for an MCP host (docs/protocol.md section 9): beside
// the gateway's own tools, a host on /mcp?pod=NAME sees the tools of the
// pod's MCP servers (participants that joined with serves=mcp, such as
// mcpp bridge), each named SERVER__TOOL, listed where the host may call
// it (or propose the call). Calling one sends an mcp/request from the
// host's participant to the server, through the pod like any envelope
// (capabilities, rates, history; in the sub-context the host opened last,
// so that the call folds away with it), and returns the server's answer.
//
// This node learns a server's tools by asking it (tools/list, a live
// request from system:gateway that the history does not keep) when a host
// of the pod first joins here, when the server joins, and when it says its
// tools changed; it drops them when the server leaves. Each host's own
// server (mcpMember.server) then lists what changed, which notifies its
// sessions (notifications/tools/list_changed).

// Bounds of discovery: one tools/list waits at most discoveryTimeout, and
// a server's list is read in at most discoveryPages pages.
const (
	discoveryTimeout = 10 * time.Second
	discoveryPages   = 10
	// joinDiscovery bounds how long a host's first request waits for the
	// tools of the pod's servers: past it, the host is told of them with
	// notifications/tools/list_changed.
	joinDiscovery = 3 * time.Second
)

// serverTool is one tool of one of the pod's MCP servers.
type serverTool struct {
	server string // the participant that serves it
	name   string // its name at the server
	// exposed is the host's name for it (exposedName).
	exposed string
	// tool is the server's description of it, as it came (an MCP Tool).
	tool json.RawMessage
}

// podServerTools are the tools of one pod's MCP servers this node knows.
type podServerTools struct {
	mu      sync.Mutex
	servers map[string][]serverTool // by server participant
	// reading are the servers whose tools a read is under way for, each
	// with whether to read them again when it ends: however often a
	// server says its tools changed, one read of them is in flight.
	reading map[string]bool
}

// exposedName is the name under which a host sees tool of server: the
// server's participant id, its bytes outside MCP's tool-name characters
// ([A-Za-z0-9_.-]) and its "_" written _HH, then "__", then the tool's
// name, its bytes outside MCP's characters written _HH. The first "__"
// ends the participant (whose escaped form holds no "__"), so it is read
// back exactly. A name over 128 bytes, MCP's bound, is not listed.
func exposedName(server, tool string) (string, bool) {
	var b strings.Builder
	escape := func(s string, underscore bool) {
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_' && !underscore:
				b.WriteByte(c)
			default:
				fmt.Fprintf(&b, "_%02x", c)
			}
		}
	}
	escape(server, true)
	b.WriteString("__")
	escape(tool, false)
	name := b.String()
	return name, tool != "" && len(name) <= 128
}

// serverOf reads the participant back from an exposed name.
func serverOf(exposed string) (string, bool) {
	esc, _, ok := strings.Cut(exposed, "__")
	if !ok {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(esc); i++ {
		if esc[i] != '_' {
			b.WriteByte(esc[i])
			continue
		}
		if i+2 >= len(esc) {
			return "", false
		}
		c, err := strconv.ParseUint(esc[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String(), true
}

// podTools is what this node knows of the servers' tools of a pod.
func (e *mcpEndpoint) podTools(name string) *podServerTools {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.serverTools[name]
	if t == nil {
		t = &podServerTools{servers: map[string][]serverTool{}, reading: map[string]bool{}}
		e.serverTools[name] = t
	}
	return t
}

// hosts lists this node's members in a pod.
func (e *mcpEndpoint) hosts(podName string) []*mcpMember {
	var out []*mcpMember
	for _, m := range e.ready() {
		if m.pod.Name == podName {
			out = append(out, m)
		}
	}
	return out
}

// serversChanged is the pods' OnServers: server of p may have joined,
// left or changed its tools. When hosts of p are here, its tools are read
// again, and each host is told what changed for it.
func (e *mcpEndpoint) serversChanged(p *pod.Pod, server string) {
	hosts := e.hosts(p.Name)
	if len(hosts) == 0 {
		e.mu.Lock()
		delete(e.serverTools, p.Name)
		e.mu.Unlock()
		return
	}
	if e.readLatest(p, server) {
		for _, m := range e.hosts(p.Name) {
			m.syncTools()
		}
	}
}

// readLatest reads server's tools (readTools), unless a read of them is
// under way: that one then reads them again when it ends, once however
// often it was asked meanwhile. It reports whether it read them, and so
// whether the hosts are to be told.
func (e *mcpEndpoint) readLatest(p *pod.Pod, server string) bool {
	t := e.podTools(p.Name)
	t.mu.Lock()
	if _, busy := t.reading[server]; busy {
		t.reading[server] = true
		t.mu.Unlock()
		return false
	}
	t.reading[server] = false
	t.mu.Unlock()
	for {
		e.readTools(p, server)
		t.mu.Lock()
		again := t.reading[server]
		if !again {
			delete(t.reading, server)
		} else {
			t.reading[server] = false
		}
		t.mu.Unlock()
		if !again {
			return true
		}
	}
}

// discover reads the tools of the pod's servers that this node does not
// know yet, within joinDiscovery: a host's first tools/list lists them.
func (e *mcpEndpoint) discover(p *pod.Pod) {
	t := e.podTools(p.Name)
	var wg sync.WaitGroup
	for _, server := range p.Servers() {
		t.mu.Lock()
		_, known := t.servers[server]
		t.mu.Unlock()
		if known {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.readLatest(p, server)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(joinDiscovery):
		// The rest come as notifications/tools/list_changed.
		go func() {
			<-done
			for _, m := range e.hosts(p.Name) {
				m.syncTools()
			}
		}()
	}
}

// serverRetries are the waits before asking a server for its tools again
// when it answered with an error: a bridge answers server_down while its
// server starts.
var serverRetries = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// readTools asks server for its tools (tools/list, every page) and keeps
// them; a server that is not in the pod (or does not answer) has none.
// One that answers with an error is asked again a few times
// (serverRetries), and the hosts are told when it lists its tools.
func (e *mcpEndpoint) readTools(p *pod.Pod, server string) {
	if e.readToolsOnce(p, server) {
		return
	}
	go func() {
		for _, d := range serverRetries {
			time.Sleep(d)
			if p.Dead() || !presentIn(p.Servers(), server) {
				return
			}
			if e.readToolsOnce(p, server) {
				for _, m := range e.hosts(p.Name) {
					m.syncTools()
				}
				return
			}
		}
	}()
}

// readToolsOnce is one reading of readTools; it reports false when the
// server answered with an error.
func (e *mcpEndpoint) readToolsOnce(p *pod.Pod, server string) bool {
	answered := true
	ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
	defer cancel()
	var tools []serverTool
	cursor := ""
	for page := 0; page < discoveryPages; page++ {
		req := map[string]any{"jsonrpc": "2.0", "id": "mcpp-tools-" + uuid.NewString()[:8], "method": "tools/list"}
		if cursor != "" {
			req["params"] = map[string]any{"cursor": cursor}
		}
		payload, _ := json.Marshal(req)
		body, err := p.Ask(ctx, server, payload)
		if err != nil {
			e.g.log.Debug("the tools of an MCP server could not be read", "pod", p.Name, "server", server, "err", err)
			break
		}
		if gjson.GetBytes(body, "payload.error").Exists() {
			answered = false
			break
		}
		res := gjson.GetBytes(body, "payload.result")
		for _, raw := range res.Get("tools").Array() {
			name := raw.Get("name").String()
			exposed, ok := exposedName(server, name)
			if !ok {
				e.g.log.Info("a tool of an MCP server is not listed to hosts: its name is empty or too long", "pod", p.Name, "server", server, "tool", name)
				continue
			}
			tools = append(tools, serverTool{server: server, name: name, exposed: exposed, tool: json.RawMessage(raw.Raw)})
		}
		if cursor = res.Get("nextCursor").String(); cursor == "" {
			break
		}
	}
	t := e.podTools(p.Name)
	t.mu.Lock()
	if len(tools) == 0 && !presentIn(p.Servers(), server) {
		delete(t.servers, server)
	} else {
		t.servers[server] = tools
	}
	t.mu.Unlock()
	return answered
}

func presentIn(list []string, id string) bool {
	for _, s := range list {
		if s == id {
			return true
		}
	}
	return false
}

// callProbe is the payload a host's capabilities are checked against to
// list a tool: a call of it without arguments.
func callProbe(tool string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": map[string]any{"name": tool}})
	return b
}

// syncTools makes the member's server list the servers' tools the member
// may call or propose, and no other: its sessions are notified of a
// change (the SDK's notifications/tools/list_changed).
func (m *mcpMember) syncTools() {
	if m.ended() {
		return
	}
	t := m.e.podTools(m.pod.Name)
	want := map[string]serverTool{}
	t.mu.Lock()
	for server, tools := range t.servers {
		if server == m.id {
			continue // its own tools it calls itself
		}
		for _, st := range tools {
			if call, propose := m.pod.MayCall(m.id, m.caps.Load(), server, callProbe(st.name), m.branch()); call || propose {
				want[st.exposed] = st
			}
		}
	}
	t.mu.Unlock()
	m.toolsMu.Lock()
	defer m.toolsMu.Unlock()
	var gone []string
	for name := range m.tools {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		m.server.RemoveTools(gone...)
	}
	for name, st := range want {
		if old, ok := m.tools[name]; ok && string(old.tool) == string(st.tool) {
			continue
		}
		if err := m.addServerTool(st); err != nil {
			m.e.g.log.Info("a tool of an MCP server is not listed to a host", "pod", m.pod.Name, "server", st.server, "tool", st.name, "err", err)
			delete(want, name)
		}
	}
	m.tools = want
}

// addServerTool adds st to the member's server, described as the server
// describes it, with a line saying whose it is. An input schema that is
// not an object schema is replaced by the empty one: the server judges
// the arguments.
func (m *mcpMember) addServerTool(st serverTool) (err error) {
	var tool mcp.Tool
	if err := json.Unmarshal(st.tool, &tool); err != nil {
		return fmt.Errorf("the tool's description does not read: %w", err)
	}
	tool.Name = st.exposed
	tool.Description = fmt.Sprintf("Tool %q of %s, an MCP server in pod %s; the call goes through the pod, where others may see it. %s",
		st.name, st.server, m.pod.Name, tool.Description)
	if gjson.GetBytes(st.tool, "inputSchema.type").String() != "object" {
		tool.InputSchema = json.RawMessage(`{"type": "object"}`)
	} else {
		tool.InputSchema = json.RawMessage(gjson.GetBytes(st.tool, "inputSchema").Raw)
	}
	if out := gjson.GetBytes(st.tool, "outputSchema"); out.Exists() {
		tool.OutputSchema = json.RawMessage(out.Raw)
	} else {
		tool.OutputSchema = nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the SDK refused it: %v", r)
		}
	}()
	server, name := st.server, st.name
	m.server.AddTool(&tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return m.e.callServerTool(ctx, memberOf(ctx), server, name, req)
	})
	return nil
}

// branch is the sub-context the member opened last with context_branch
// and that is still open, or "".
func (m *mcpMember) branch() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.branches) > 0 {
		last := m.branches[len(m.branches)-1]
		if m.pod.Registry.Active(last) {
			return last
		}
		m.branches = m.branches[:len(m.branches)-1]
	}
	return ""
}

// opened records a sub-context the member opened.
func (m *mcpMember) opened(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.branches = append(m.branches, id)
	if len(m.branches) > 64 {
		m.branches = m.branches[len(m.branches)-64:]
	}
}
