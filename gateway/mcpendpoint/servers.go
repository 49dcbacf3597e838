package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
// server (member.server) then lists what changed, which notifies its
// sessions (notifications/tools/list_changed). The server's resources,
// resource templates and prompts are learnt the same way, each list on
// its own word that it changed (resources.go, prompts.go).

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

// podServerTools are the tools, resources and prompts of one pod's MCP
// servers this node knows.
type podServerTools struct {
	mu      sync.Mutex
	servers map[string][]serverTool // by server participant
	// resources and prompts are the servers' other lists, by server
	// participant (resources.go, prompts.go).
	resources map[string]serverResources
	prompts   map[string][]serverPrompt
	// reading are the lists of servers a read is under way for, each
	// with whether to read it again when it ends: however often a
	// server says a list changed, one read of it is in flight.
	reading map[serverList]bool
}

// listKind is one of the lists of a server that the gateway reads.
type listKind int

const (
	listTools     listKind = iota
	listResources          // its resources and resource templates
	listPrompts
)

// allLists are read when a server joins, and when a host first joins.
var allLists = []listKind{listTools, listResources, listPrompts}

// serverList is one list of one server.
type serverList struct {
	server string
	list   listKind
}

// listsChanged are the lists a server's notification says changed.
func listsChanged(notification string) []listKind {
	switch notification {
	case "": // it joined or left
		return allLists
	case "notifications/tools/list_changed":
		return []listKind{listTools}
	case "notifications/resources/list_changed":
		return []listKind{listResources}
	case "notifications/prompts/list_changed":
		return []listKind{listPrompts}
	}
	return nil
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
func (e *Endpoint) podTools(name string) *podServerTools {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.serverTools[name]
	if t == nil {
		t = &podServerTools{servers: map[string][]serverTool{}, resources: map[string]serverResources{},
			prompts: map[string][]serverPrompt{}, reading: map[serverList]bool{}}
		e.serverTools[name] = t
	}
	return t
}

// hosts lists this node's members in a pod.
func (e *Endpoint) hosts(podName string) []*member {
	var out []*member
	for _, m := range e.ready() {
		if m.pod.Name == podName {
			out = append(out, m)
		}
	}
	return out
}

// ServersChanged is the pods' OnServers (Node.OnServers): a server of p joined or left,
// said that some of its lists changed, or that one of its resources did
// (resourceUpdated). When hosts of p are here, the lists are read again,
// and each host is told what changed for it.
func (e *Endpoint) ServersChanged(p *pod.Pod, c pod.ServerChange) {
	hosts := e.hosts(p.Name)
	if len(hosts) == 0 {
		e.mu.Lock()
		delete(e.serverTools, p.Name)
		e.mu.Unlock()
		return
	}
	if c.Notification == resourceUpdated {
		e.resourceUpdated(p, c.Server, c.URI)
		return
	}
	for _, list := range listsChanged(c.Notification) {
		if e.readLatest(p, c.Server, list) {
			for _, m := range e.hosts(p.Name) {
				m.syncList(list)
			}
		}
	}
}

// readLatest reads one list of server (readList), unless a read of it is
// under way: that one then reads it again when it ends, once however
// often it was asked meanwhile. It reports whether it read it, and so
// whether the hosts are to be told.
func (e *Endpoint) readLatest(p *pod.Pod, server string, list listKind) bool {
	t := e.podTools(p.Name)
	key := serverList{server, list}
	t.mu.Lock()
	if _, busy := t.reading[key]; busy {
		t.reading[key] = true
		t.mu.Unlock()
		return false
	}
	t.reading[key] = false
	t.mu.Unlock()
	for {
		e.readList(p, server, list)
		t.mu.Lock()
		again := t.reading[key]
		if !again {
			delete(t.reading, key)
		} else {
			t.reading[key] = false
		}
		t.mu.Unlock()
		if !again {
			return true
		}
	}
}

// syncList makes the member's server list what it may use of one list
// of the pod's servers.
func (m *member) syncList(list listKind) {
	switch list {
	case listTools:
		m.syncTools()
	case listResources:
		m.syncResources()
	case listPrompts:
		m.syncPrompts()
	}
}

// syncLists is syncList of every list.
func (m *member) syncLists() {
	for _, list := range allLists {
		m.syncList(list)
	}
}

// discover reads the lists of the pod's servers that this node does not
// know yet, within joinDiscovery: a host's first tools/list lists them.
func (e *Endpoint) discover(p *pod.Pod) {
	t := e.podTools(p.Name)
	var wg sync.WaitGroup
	for _, server := range p.Servers() {
		for _, list := range allLists {
			t.mu.Lock()
			known := t.known(server, list)
			t.mu.Unlock()
			if known {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.readLatest(p, server, list)
			}()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(joinDiscovery):
		// The rest come as notifications of list changes.
		go func() {
			<-done
			for _, m := range e.hosts(p.Name) {
				m.syncLists()
			}
		}()
	}
}

// serverRetries are the waits before asking a server for its tools again
// when it answered with an error: a bridge answers server_down while its
// server starts.
var serverRetries = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// known reports whether the node has read list of server. Call it with
// t.mu held.
func (t *podServerTools) known(server string, list listKind) bool {
	var ok bool
	switch list {
	case listTools:
		_, ok = t.servers[server]
	case listResources:
		_, ok = t.resources[server]
	case listPrompts:
		_, ok = t.prompts[server]
	}
	return ok
}

// readList asks server for one of its lists (every page) and keeps it; a
// server that is not in the pod (or does not answer) has none. One that
// answers with an error is asked again a few times (serverRetries), and
// the hosts are told when it lists it.
func (e *Endpoint) readList(p *pod.Pod, server string, list listKind) {
	if e.readListOnce(p, server, list) {
		return
	}
	go func() {
		for _, d := range serverRetries {
			time.Sleep(d)
			if p.Dead() || !presentIn(p.Servers(), server) {
				return
			}
			if e.readListOnce(p, server, list) {
				for _, m := range e.hosts(p.Name) {
					m.syncList(list)
				}
				return
			}
		}
	}()
}

// readListOnce is one reading of readList; it reports false when the
// server answered with an error.
func (e *Endpoint) readListOnce(p *pod.Pod, server string, list listKind) bool {
	switch list {
	case listResources:
		return e.readResourcesOnce(p, server)
	case listPrompts:
		return e.readPromptsOnce(p, server)
	}
	return e.readToolsOnce(p, server)
}

// readPages reads a list of server (method, every page, at most
// discoveryPages), handing each item of the result's field to each. It
// reports false when the server answered with an error, but for -32601
// (method not found): a server without that feature has none of it.
func (e *Endpoint) readPages(p *pod.Pod, server, method, field string, each func(gjson.Result)) bool {
	ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
	defer cancel()
	cursor := ""
	for page := 0; page < discoveryPages; page++ {
		req := map[string]any{"jsonrpc": "2.0", "id": "mcpp-list-" + uuid.NewString()[:8], "method": method}
		if cursor != "" {
			req["params"] = map[string]any{"cursor": cursor}
		}
		payload, _ := json.Marshal(req)
		body, err := p.Ask(ctx, server, payload)
		if err != nil {
			e.g.Log.Debug("a list of an MCP server could not be read", "pod", p.Name, "server", server, "method", method, "err", err)
			return true
		}
		if rpcErr := gjson.GetBytes(body, "payload.error"); rpcErr.Exists() {
			return rpcErr.Get("code").Int() == jsonrpc.CodeMethodNotFound
		}
		res := gjson.GetBytes(body, "payload.result")
		for _, raw := range res.Get(field).Array() {
			each(raw)
		}
		if cursor = res.Get("nextCursor").String(); cursor == "" {
			break
		}
	}
	return true
}

// readToolsOnce reads server's tools (tools/list).
func (e *Endpoint) readToolsOnce(p *pod.Pod, server string) bool {
	var tools []serverTool
	answered := e.readPages(p, server, "tools/list", "tools", func(raw gjson.Result) {
		name := raw.Get("name").String()
		exposed, ok := exposedName(server, name)
		if !ok {
			e.g.Log.Info("a tool of an MCP server is not listed to hosts: its name is empty or too long", "pod", p.Name, "server", server, "tool", name)
			return
		}
		tools = append(tools, serverTool{server: server, name: name, exposed: exposed, tool: json.RawMessage(raw.Raw)})
	})
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
func (m *member) syncTools() {
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
			m.e.g.Log.Info("a tool of an MCP server is not listed to a host", "pod", m.pod.Name, "server", st.server, "tool", st.name, "err", err)
			delete(want, name)
		}
	}
	m.tools = want
}

// addServerTool adds st to the member's server, described as the server
// describes it, with a line saying whose it is. An input schema that is
// not an object schema is replaced by the empty one: the server judges
// the arguments.
func (m *member) addServerTool(st serverTool) (err error) {
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
func (m *member) branch() string {
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
func (m *member) opened(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.branches = append(m.branches, id)
	if len(m.branches) > 64 {
		m.branches = m.branches[len(m.branches)-64:]
	}
}
