package mcpendpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// A participant's inbox in a pod, as an MCP resource (docs/protocol.md
// section 9): a host subscribes to it (resources/subscribe) and is sent
// notifications/resources/updated when an envelope addressed to the
// participant is accepted, or a context it sent in concludes, so that it
// calls pod_read at once instead of polling. Reading it returns the
// newest envelopes addressed to the participant.

// inboxTemplate is the inbox's URI template (RFC 6570).
const inboxTemplate = "mcpp://pods/{pod}/inbox/{participant}"

// inboxReadLimit is how many addressed envelopes a read of the inbox
// returns, newest last.
const inboxReadLimit = 50

// inboxURI is the inbox of participant id in pod, escaped as a path
// segment (parseInbox takes it escaped or not).
func inboxURI(podName, id string) string {
	return "mcpp://pods/" + url.PathEscape(podName) + "/inbox/" + url.PathEscape(id)
}

// parseInbox reads an inbox URI, escaped or not.
func parseInbox(uri string) (podName, id string, ok bool) {
	rest, found := strings.CutPrefix(uri, "mcpp://pods/")
	if !found {
		return "", "", false
	}
	p, i, found := strings.Cut(rest, "/inbox/")
	if !found {
		return "", "", false
	}
	var err1, err2 error
	podName, err1 = url.PathUnescape(p)
	id, err2 = url.PathUnescape(i)
	return podName, id, err1 == nil && err2 == nil && podName != "" && id != ""
}

// addInbox adds the inbox resource template.
func (e *Endpoint) addInbox(s *mcp.Server) {
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name: "inbox", Title: "Your inbox in the pod", URITemplate: inboxTemplate, MIMEType: "application/json",
		Description: "The envelopes addressed to you in the pod (newest last). Subscribe to it to be notified " +
			"when one arrives or when a sub-context you sent in concludes; then call pod_read.",
	}, e.readInbox)
}

// inboxOf is the member's own inbox that uri names, or an error for a
// URI that is not one, or someone else's.
func inboxOf(m *member, uri string) error {
	podName, id, ok := parseInbox(uri)
	switch {
	case !ok:
		return fmt.Errorf("%q is not an inbox (%s)", uri, inboxTemplate)
	case podName != m.pod.Name || id != m.id:
		return fmt.Errorf("%q is not your inbox: yours is %s", uri, inboxURI(m.pod.Name, m.id))
	}
	return nil
}

// readInbox returns the newest envelopes addressed to the member.
func (e *Endpoint) readInbox(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return nil, errSessionEnded
	}
	if err := inboxOf(m, req.Params.URI); err != nil {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	x := m.pod.Index()
	answer := &pod.RawHistory{Envelopes: []json.RawMessage{}}
	// Unfolded: what was addressed to the participant in a context that
	// has concluded since is still its mail.
	sel := x.Newest(inboxReadLimit, false, func(meta *envelope.Meta) bool { return addressedTo(meta, m.id) })
	answer.More = sel.More
	n, err := m.pod.Render(ctx, wire.ProtocolMCPP, sel.Entries, func(b []byte) { answer.Envelopes = append(answer.Envelopes, b) })
	if err != nil {
		answer.More = true // what could be read, oldest first
	}
	for _, s := range sel.Entries[:n] {
		answer.Tokens += s.Tokens
	}
	b, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
}

// addressedTo reports whether an envelope's to names id.
func addressedTo(m *envelope.Meta, id string) bool {
	for _, to := range m.To {
		if to == id {
			return true
		}
	}
	return false
}

// subscribe is resources/subscribe: the member's own inbox only.
func (e *Endpoint) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	m := memberOf(ctx)
	if m == nil || m.ended() {
		return errSessionEnded
	}
	if err := inboxOf(m, req.Params.URI); err != nil {
		return err
	}
	m.listen(req.Params.URI)
	return nil
}

// unsubscribe is resources/unsubscribe. The member keeps listening: the
// SDK notifies only the sessions still subscribed.
func (e *Endpoint) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	m := memberOf(ctx)
	if m == nil {
		return errSessionEnded
	}
	return inboxOf(m, req.Params.URI)
}

// listen has the pod knock on the member's inbox, and a goroutine of its
// own send the notification, until the member ends: the pod calls with
// its lock held, so a knock only marks the inbox (a burst of envelopes
// is one notification, sent as soon as the previous one is). uri is the
// inbox as a session subscribed to it: the SDK notifies by the exact
// URI, and a host may write the participant escaped ("%40") or not.
func (m *member) listen(uri string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over {
		return
	}
	if m.inboxURIs == nil {
		m.inboxURIs = map[string]struct{}{}
	}
	m.inboxURIs[uri] = struct{}{}
	if m.knocks != nil {
		return
	}
	m.knocks = make(chan struct{}, 1)
	knocks := m.knocks
	m.guest.SetInbox(func() {
		select {
		case knocks <- struct{}{}:
		default:
		}
	})
	server := m.server
	go func() {
		for {
			select {
			case <-knocks:
				m.mu.Lock()
				uris := make([]string, 0, len(m.inboxURIs))
				for u := range m.inboxURIs {
					uris = append(uris, u)
				}
				m.mu.Unlock()
				for _, u := range uris {
					_ = server.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: u})
				}
			case <-m.done:
				m.guest.SetInbox(nil)
				return
			}
		}
	}()
}
