package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
)

// The resources of the pod's MCP servers for an MCP host (docs/protocol.md
// section 9): beside the inbox, a host on /mcp?pod=NAME lists the
// resources and resource templates of the pod's MCP servers, each under a
// URI of the gateway's that says whose it is (serverURI), where its
// capabilities allow reading it. Reading one is the host's resources/read
// to the server through the pod (ask.go); subscribing to one is its
// resources/subscribe (subscriptions.go). The lists are learnt as the
// tools are (servers.go): resources/list and resources/templates/list
// when a server joins, when a host first joins, and when the server says
// notifications/resources/list_changed.

// serverURIsOf is what every host URI of a server's resource starts with.
const serverURIsOf = "mcpp://pods/"

// serverURIPrefix is the start of the URIs under which a host of pod sees
// the resources of server: mcpp://pods/POD/servers/SERVER/, the server's
// participant id with its bytes outside RFC 3986's unreserved characters
// ([A-Za-z0-9._~-]) written %HH (a pod's name has none). Its second
// segment, "servers", is not the inbox's "inbox": the two never collide.
func serverURIPrefix(podName, server string) string {
	var b strings.Builder
	b.WriteString(serverURIsOf)
	b.WriteString(podName)
	b.WriteString("/servers/")
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(server); i++ {
		switch c := server[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	b.WriteByte('/')
	return b.String()
}

// serverURI is the host's URI for a resource URI (or URI template) of
// server: the prefix, then the server's own URI exactly as it is. Not
// escaping it is what keeps a template a template: the host's expansion
// of prefix+template is the prefix followed by its expansion of the
// server's template (an expression expands the same wherever it stands),
// so cutting the prefix off gives the server the URI it would have got
// from the host itself. An escaped template could not be read back: an
// escaped "/" between two expressions ("{a}%2F{b}") looks like an
// expansion's own "%2F".
func serverURI(podName, server, uri string) string {
	return serverURIPrefix(podName, server) + uri
}

// parseServerURI reads a host's URI of a server's resource back into the
// pod, the server and the server's own URI. The server is read only as
// serverURIPrefix writes it: a URI has one spelling, so that it names one
// resource and one subscription.
func parseServerURI(s string) (podName, server, uri string, ok bool) {
	rest, ok := strings.CutPrefix(s, serverURIsOf)
	if !ok {
		return "", "", "", false
	}
	podName, rest, ok = strings.Cut(rest, "/")
	if !ok || !envelope.ValidPodName(podName) {
		return "", "", "", false
	}
	rest, ok = strings.CutPrefix(rest, "servers/")
	if !ok {
		return "", "", "", false
	}
	seg, uri, ok := strings.Cut(rest, "/")
	if !ok || seg == "" || uri == "" {
		return "", "", "", false
	}
	server, err := url.PathUnescape(seg)
	if err != nil || serverURIPrefix(podName, server) != s[:len(s)-len(uri)] {
		return "", "", "", false
	}
	return podName, server, uri, true
}

// serverResourceOf reads a host's URI of a resource of one of its pod's
// servers: the server and its own URI.
func (m *member) serverResourceOf(hostURI string) (server, uri string, ok bool) {
	podName, server, uri, ok := parseServerURI(hostURI)
	if !ok || podName != m.pod.Name {
		return "", "", false
	}
	return server, uri, true
}

// serverResource is one resource of one of the pod's MCP servers.
type serverResource struct {
	server string
	uri    string // its URI at the server
	mapped string // the host's (serverURI)
	// raw is the server's description of it, as it came (an MCP Resource).
	raw json.RawMessage
}

// serverTemplate is one resource template of one of the pod's MCP servers.
type serverTemplate struct {
	server   string
	template string // its URI template at the server
	mapped   string // the host's (serverURI)
	// raw is the server's description of it (an MCP ResourceTemplate).
	raw json.RawMessage
}

// serverResources are one server's resources and resource templates.
type serverResources struct {
	resources []serverResource
	templates []serverTemplate
}

// memberLists are what of the pod's servers a member's server lists
// beside their tools, and the servers' resources its sessions subscribed
// to.
type memberLists struct {
	mu        sync.Mutex
	resources map[string]serverResource // by the host's URI
	templates map[string]serverTemplate // by the host's URI template
	prompts   map[string]serverPrompt   // by the host's name
	subs      map[string]*serverSub     // by the URI the host subscribed with
}

// readResourcesOnce reads server's resources and resource templates
// (resources/list, resources/templates/list) and keeps them; it reports
// false when the server answered either with an error.
func (e *Endpoint) readResourcesOnce(p *pod.Pod, server string) bool {
	var got serverResources
	answered := e.readPages(p, server, "resources/list", "resources", func(raw gjson.Result) {
		uri := raw.Get("uri").String()
		if uri == "" {
			e.g.Log.Info("a resource of an MCP server is not listed to hosts: it has no URI", "pod", p.Name, "server", server)
			return
		}
		got.resources = append(got.resources, serverResource{server: server, uri: uri, mapped: serverURI(p.Name, server, uri), raw: json.RawMessage(raw.Raw)})
	})
	answered = e.readPages(p, server, "resources/templates/list", "resourceTemplates", func(raw gjson.Result) {
		tmpl := raw.Get("uriTemplate").String()
		if tmpl == "" {
			e.g.Log.Info("a resource template of an MCP server is not listed to hosts: it has no URI template", "pod", p.Name, "server", server)
			return
		}
		got.templates = append(got.templates, serverTemplate{server: server, template: tmpl, mapped: serverURI(p.Name, server, tmpl), raw: json.RawMessage(raw.Raw)})
	}) && answered
	t := e.podTools(p.Name)
	t.mu.Lock()
	if len(got.resources)+len(got.templates) == 0 && !presentIn(p.Servers(), server) {
		delete(t.resources, server)
	} else {
		t.resources[server] = got
	}
	t.mu.Unlock()
	return answered
}

// readProbe is the payload a host's capabilities are checked against to
// list a resource, or a template (its URI template standing for the URIs
// it expands to): a read of it.
func readProbe(uri string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "resources/read", "params": map[string]any{"uri": uri}})
	return b
}

// syncResources makes the member's server list the servers' resources
// and templates the member may read, and no other: its sessions are
// notified of a change (notifications/resources/list_changed).
func (m *member) syncResources() {
	if m.ended() {
		return
	}
	caps, cx := m.caps.Load(), m.branch()
	may := func(server, uri string) bool {
		call, _ := m.pod.MayCall(m.id, caps, server, readProbe(uri), cx)
		return call
	}
	wantR, wantT := map[string]serverResource{}, map[string]serverTemplate{}
	t := m.e.podTools(m.pod.Name)
	t.mu.Lock()
	for server, rs := range t.resources {
		if server == m.id {
			continue // its own it reads itself
		}
		for _, r := range rs.resources {
			if may(server, r.uri) {
				wantR[r.mapped] = r
			}
		}
		for _, tp := range rs.templates {
			if may(server, tp.template) {
				wantT[tp.mapped] = tp
			}
		}
	}
	t.mu.Unlock()

	l := &m.listed
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []string
	for uri := range l.resources {
		if _, ok := wantR[uri]; !ok {
			gone = append(gone, uri)
		}
	}
	if len(gone) > 0 {
		m.server.RemoveResources(gone...)
	}
	for uri, r := range wantR {
		if old, ok := l.resources[uri]; ok && string(old.raw) == string(r.raw) {
			continue
		}
		if err := m.addServerResource(r); err != nil {
			m.e.g.Log.Info("a resource of an MCP server is not listed to a host", "pod", m.pod.Name, "server", r.server, "uri", r.uri, "err", err)
			delete(wantR, uri)
		}
	}
	l.resources = wantR

	gone = gone[:0]
	for tmpl := range l.templates {
		if _, ok := wantT[tmpl]; !ok {
			gone = append(gone, tmpl)
		}
	}
	if len(gone) > 0 {
		m.server.RemoveResourceTemplates(gone...)
	}
	for tmpl, tp := range wantT {
		if old, ok := l.templates[tmpl]; ok && string(old.raw) == string(tp.raw) {
			continue
		}
		if err := m.addServerTemplate(tp); err != nil {
			m.e.g.Log.Info("a resource template of an MCP server is not listed to a host", "pod", m.pod.Name, "server", tp.server, "template", tp.template, "err", err)
			delete(wantT, tmpl)
		}
	}
	l.templates = wantT
}

// whose is the line that starts the description of a server's resource,
// template or prompt: whose it is, and that using it goes through the pod.
func (m *member) whose(what, server, verb, description string) string {
	return fmt.Sprintf("%s of %s, an MCP server in pod %s; %s it goes through the pod, where others may see it. %s",
		what, server, m.pod.Name, verb, description)
}

// addServerResource adds r to the member's server under its host URI,
// described as the server describes it, with a line saying whose it is.
func (m *member) addServerResource(r serverResource) (err error) {
	var res mcp.Resource
	if err := json.Unmarshal(r.raw, &res); err != nil {
		return fmt.Errorf("the resource's description does not read: %w", err)
	}
	res.URI = r.mapped
	res.Description = m.whose(fmt.Sprintf("Resource %q", r.uri), r.server, "reading", res.Description)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the SDK refused it: %v", p)
		}
	}()
	m.server.AddResource(&res, m.e.readServerResource)
	return nil
}

// addServerTemplate adds tp to the member's server under its host URI
// template.
func (m *member) addServerTemplate(tp serverTemplate) (err error) {
	var tmpl mcp.ResourceTemplate
	if err := json.Unmarshal(tp.raw, &tmpl); err != nil {
		return fmt.Errorf("the template's description does not read: %w", err)
	}
	tmpl.URITemplate = tp.mapped
	tmpl.Description = m.whose(fmt.Sprintf("Resource template %q", tp.template), tp.server, "reading a resource of", tmpl.Description)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the SDK refused it: %v", p)
		}
	}()
	m.server.AddResourceTemplate(&tmpl, m.e.readServerResource)
	return nil
}

// readServerResource reads a resource of one of the pod's servers for
// the member: its resources/read, through the pod, of the server's own
// URI. The result is the server's as it came, as the SDK's types read it,
// with the URIs of its contents written as the host's.
func (e *Endpoint) readServerResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	server, uri, ok := m.serverResourceOf(req.Params.URI)
	if !ok {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	raw, err := m.ask(ctx, server, "resources/read", map[string]any{"uri": uri})
	if err != nil {
		return nil, err
	}
	var res mcp.ReadResourceResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, notOfKind(server, "a resource's contents", raw, err)
	}
	for _, c := range res.Contents {
		if c != nil && c.URI != "" {
			c.URI = serverURI(m.pod.Name, server, c.URI)
		}
	}
	return &res, nil
}

// notOfKind is the error for a server's result that does not read as
// what was asked.
func notOfKind(server, what string, raw json.RawMessage, err error) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: fmt.Sprintf("%s answered a result that is not %s (%v): %s", server, what, err, raw)}
}
