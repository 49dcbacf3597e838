package pod

import (
	"strings"

	"github.com/tidwall/gjson"
)

// The notifications of an MCP server that the gateway acts on, for the
// MCP hosts it serves (docs/protocol.md section 9): a server's word that
// one of its lists changed has the lists read again, and its word that a
// resource changed goes to the hosts subscribed to it. Ingress flags an
// mcp/notification of one of these (FlagCall), so that every node applies
// it (applyCall), and tells OnServers when the sender serves MCP.
const (
	toolsChanged     = "notifications/tools/list_changed"
	resourcesChanged = "notifications/resources/list_changed"
	promptsChanged   = "notifications/prompts/list_changed"
	resourceUpdated  = "notifications/resources/updated"
)

// serverNotice reports whether method is one of the notifications above.
func serverNotice(method string) bool {
	switch method {
	case toolsChanged, resourcesChanged, promptsChanged, resourceUpdated:
		return true
	}
	return false
}

// ServerChange is what Node.OnServers is told: Server, a participant that
// serves MCP, joined or left the pod (Notification is ""), or it sent
// Notification, one of the notifications above, to the pod; URI is the
// resource of a notifications/resources/updated.
type ServerChange struct {
	Server       string
	Notification string
	URI          string
}

// serverNotified tells OnServers of a server's notification, body the
// frame's. Call it with Pod.mu held.
func (p *Pod) serverNotified(from string, body []byte) {
	r := gjson.GetManyBytes(body, "payload.method", "payload.params.uri")
	if !serverNotice(r[0].Str) || !p.servesMCP(from) {
		return
	}
	p.serversChanged(ServerChange{Server: strings.Clone(from), Notification: strings.Clone(r[0].Str), URI: strings.Clone(r[1].Str)})
}
