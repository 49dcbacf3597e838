package pod

import (
	"encoding/json"
	"strings"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/wire"
)

// The cluster's bookkeeping of a pod: who of its members is connected to
// another node. Presence frames of other nodes keep it current; a node
// that opens the pod asks the others once (SyncMembers); a node that is
// gone takes its members with it (RemoveNode).

// remoteMember is a participant connected to another node.
type remoteMember struct {
	wire.Identity
	node string
}

// remoteJoin records a join on another node and reports whether the local
// members are to be told. A join of an id already in the pod is a
// replacement: a connection here is closed with 4000, and nobody is told.
// Call it with Pod.mu held.
func (p *Pod) remoteJoin(m *envelope.Meta, body []byte) bool {
	id, ok := presenceIdentity(body)
	if !ok {
		return false
	}
	old := p.members[id.ID]
	_, wasRemote := p.remote[id.ID]
	if old != nil {
		delete(p.members, id.ID)
		p.rebuildSnapshot()
	}
	oldGuest := p.dropGuest(id.ID)
	p.remote[id.ID] = remoteMember{Identity: id, node: strings.Clone(m.Origin)}
	if old != nil {
		old.Close(participant.StatusReplaced, "replaced by a new connection of the same participant on another gateway node")
	}
	return old == nil && oldGuest == nil && !wasRemote
}

// remoteLeave records a leave on another node and reports whether to tell
// the local members: not when the participant has since joined elsewhere.
// Call it with Pod.mu held.
func (p *Pod) remoteLeave(m *envelope.Meta) bool {
	if r, ok := p.remote[m.From]; ok && r.node == m.Origin {
		delete(p.remote, m.From)
		return true
	}
	return false
}

// RemoveNode forgets the members of a node that is gone and tells the
// local members they left.
func (p *Pod) RemoveNode(node string) {
	p.lock()
	defer p.unlock()
	for id, r := range p.remote {
		if r.node != node {
			continue
		}
		delete(p.remote, id)
		m := envelope.Meta{Kind: envelope.FrameLeave, Origin: node, From: r.ID, Protocol: protocolSpan}
		body, _ := presenceMessage(wire.PresenceLeave, r.Identity, "its gateway node is gone")
		p.delivered(p.deliver(&m, body, false), len(body))
	}
}

// SyncMembers learns, once, the members other nodes have in the pod.
func (p *Pod) SyncMembers() {
	if p.node.Cluster == nil {
		return
	}
	p.synced.Do(func() {
		replies := p.node.Cluster.Members(p.Name)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, r := range replies {
			for _, id := range r.Members {
				_, here := p.members[id.ID]
				if _, guest := p.guests[id.ID]; !here && !guest {
					p.remote[id.ID] = remoteMember{Identity: id, node: r.Node}
				}
			}
		}
	})
}

// presenceIdentity reads the participant of a presence frame's body.
func presenceIdentity(body []byte) (wire.Identity, bool) {
	var v struct {
		Payload wire.Presence `json:"payload"`
	}
	if err := json.Unmarshal(body, &v); err != nil || !envelope.ValidParticipantID(v.Payload.Participant.ID) {
		return wire.Identity{}, false
	}
	return v.Payload.Participant, true
}
