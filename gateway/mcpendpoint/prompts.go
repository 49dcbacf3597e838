package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/pod"
)

// The prompts of the pod's MCP servers for an MCP host (docs/protocol.md
// section 9): a host lists them named SERVER__PROMPT, as tools are named
// (exposedName), where its capabilities allow getting them; getting one
// is the host's prompts/get to the server through the pod (ask.go).
// The lists are learnt as the tools are (servers.go): prompts/list
// when a server joins, when a host first joins, and when the server says
// notifications/prompts/list_changed.

// serverPrompt is one prompt of one of the pod's MCP servers.
type serverPrompt struct {
	server  string
	name    string // its name at the server
	exposed string // the host's name for it (exposedName)
	// raw is the server's description of it, as it came (an MCP Prompt).
	raw json.RawMessage
}

// readPromptsOnce reads server's prompts (prompts/list) and keeps them;
// it reports false when the server answered with an error.
func (e *Endpoint) readPromptsOnce(p *pod.Pod, server string) bool {
	var prompts []serverPrompt
	answered := e.readPages(p, server, "prompts/list", "prompts", func(raw gjson.Result) {
		name := raw.Get("name").String()
		exposed, ok := exposedName(server, name)
		if !ok {
			e.g.Log.Info("a prompt of an MCP server is not listed to hosts: its name is empty or too long", "pod", p.Name, "server", server, "prompt", name)
			return
		}
		prompts = append(prompts, serverPrompt{server: server, name: name, exposed: exposed, raw: json.RawMessage(raw.Raw)})
	})
	t := e.podTools(p.Name)
	t.mu.Lock()
	if len(prompts) == 0 && !presentIn(p.Servers(), server) {
		delete(t.prompts, server)
	} else {
		t.prompts[server] = prompts
	}
	t.mu.Unlock()
	return answered
}

// getProbe is the payload a host's capabilities are checked against to
// list a prompt: getting it without arguments.
func getProbe(prompt string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "prompts/get", "params": map[string]any{"name": prompt}})
	return b
}

// syncPrompts makes the member's server list the servers' prompts the
// member may get, and no other: its sessions are notified of a change
// (notifications/prompts/list_changed).
func (m *member) syncPrompts() {
	if m.ended() {
		return
	}
	caps, cx := m.caps.Load(), m.branch()
	want := map[string]serverPrompt{}
	t := m.e.podTools(m.pod.Name)
	t.mu.Lock()
	for server, prompts := range t.prompts {
		if server == m.id {
			continue
		}
		for _, sp := range prompts {
			if call, _ := m.pod.MayCall(m.id, caps, server, getProbe(sp.name), cx); call {
				want[sp.exposed] = sp
			}
		}
	}
	t.mu.Unlock()

	l := &m.listed
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []string
	for name := range l.prompts {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		m.server.RemovePrompts(gone...)
	}
	for name, sp := range want {
		if old, ok := l.prompts[name]; ok && string(old.raw) == string(sp.raw) {
			continue
		}
		if err := m.addServerPrompt(sp); err != nil {
			m.e.g.Log.Info("a prompt of an MCP server is not listed to a host", "pod", m.pod.Name, "server", sp.server, "prompt", sp.name, "err", err)
			delete(want, name)
		}
	}
	l.prompts = want
}

// listedPrompt is the server's prompt the member's server lists under
// the host's name exposed.
func (m *member) listedPrompt(exposed string) (serverPrompt, bool) {
	m.listed.mu.Lock()
	defer m.listed.mu.Unlock()
	sp, ok := m.listed.prompts[exposed]
	return sp, ok
}

// addServerPrompt adds sp to the member's server under its host name,
// described as the server describes it, with a line saying whose it is.
func (m *member) addServerPrompt(sp serverPrompt) (err error) {
	var prompt mcp.Prompt
	if err := json.Unmarshal(sp.raw, &prompt); err != nil {
		return fmt.Errorf("the prompt's description does not read: %w", err)
	}
	prompt.Name = sp.exposed
	prompt.Description = m.whose(fmt.Sprintf("Prompt %q", sp.name), sp.server, "getting", prompt.Description)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the SDK refused it: %v", p)
		}
	}()
	server, name := sp.server, sp.name
	m.server.AddPrompt(&prompt, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return m.e.getServerPrompt(ctx, memberOf(ctx), server, name, req.Params.Arguments)
	})
	return nil
}

// getServerPrompt gets prompt of server for the member: its prompts/get,
// through the pod. The result is the server's as it came, as the SDK's
// types read it, with the URIs of the resources in its messages written
// as the host's.
func (e *Endpoint) getServerPrompt(ctx context.Context, m *member, server, prompt string, args map[string]string) (*mcp.GetPromptResult, error) {
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	params := map[string]any{"name": prompt}
	if args != nil {
		params["arguments"] = args
	}
	raw, err := m.ask(ctx, server, "prompts/get", params)
	if err != nil {
		return nil, err
	}
	var res mcp.GetPromptResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, notOfKind(server, "a prompt", raw, err)
	}
	for _, msg := range res.Messages {
		if msg == nil {
			continue
		}
		switch c := msg.Content.(type) {
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.URI != "" {
				c.Resource.URI = serverURI(m.pod.Name, server, c.Resource.URI)
			}
		case *mcp.ResourceLink:
			if c.URI != "" {
				c.URI = serverURI(m.pod.Name, server, c.URI)
			}
		}
	}
	return &res, nil
}
