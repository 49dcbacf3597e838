package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/wire"
)

// The operator's API asks every node of a cluster for its part of an
// answer (the pods it has open, one pod, where a participant is) with a
// NATS request on adminSubject, and waits until every node it knows of
// (their heartbeats, cluster.go) answered, or adminWait passed: the
// answer lists the nodes that did not answer, never leaves them out
// silently.
const (
	adminSubject = "mcpp.nodes.admin"
	// adminWait bounds the wait for the other nodes' answers, as
	// membersWait does for their members: a node that is busy answers
	// late, and one that is gone but not yet expired (three heartbeats)
	// never does.
	adminWait = 5 * time.Second
)

// The questions of adminQuery.
const (
	adminOpPods  = "pods"  // a page of the pods the node has open
	adminOpPod   = "pod"   // one pod's detail
	adminOpWhere = "where" // the pods where a participant is a member here
)

// adminQuery is what one node asks the others.
type adminQuery struct {
	Op string `json:"op"`
	// Pods are the operator's pod patterns: a node answers for those
	// alone.
	Pods []string `json:"pods"`
	// After and Limit page adminOpPods.
	After string `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// Pod names adminOpPod's pod, Participant adminOpWhere's participant.
	Pod         string `json:"pod,omitempty"`
	Participant string `json:"participant,omitempty"`
}

// adminReply is a node's answer: its own members only (never those it
// knows of on other nodes, which answer for themselves).
type adminReply struct {
	Node wire.AdminNode `json:"node"`
	// Pods is a page of adminOpPods, More whether the node has more pods
	// after it.
	Pods []wire.AdminPod `json:"pods,omitempty"`
	More bool            `json:"more,omitempty"`
	// Pod is adminOpPod's pod, nil when it is not open on the node.
	Pod *wire.AdminPodDetail `json:"pod,omitempty"`
	// Where are adminOpWhere's pods.
	Where []string `json:"where,omitempty"`
}

// known lists the other nodes this node has heard from.
func (c *cluster) known() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.nodes))
	for n := range c.nodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// onAdminRequest answers another node's adminQuery with this node's part.
func (c *cluster) onAdminRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var q adminQuery
	reply := adminReply{Node: c.g.adminNode()}
	if err := json.Unmarshal(m.Data, &q); err != nil {
		reply.Node.Answered, reply.Node.Error = false, fmt.Sprintf("the question does not read: %v", err)
	} else {
		reply = c.g.adminLocal(&q, false, c.replyBytes())
	}
	b, _ := json.Marshal(reply)
	if len(b) > c.replyBytes() {
		node := c.g.adminNode()
		node.Answered, node.Error = false, fmt.Sprintf("its answer is over %d bytes, the most a NATS message carries here", c.replyBytes())
		b, _ = json.Marshal(adminReply{Node: node})
	}
	_ = m.Respond(b)
}

// replyBytes bounds a node's answer: what one NATS message carries, less
// room for its headers, and never more than an HTTP answer.
func (c *cluster) replyBytes() int {
	return int(min(int64(adminAnswerBytes), c.g.nc.MaxPayload()-4096))
}

// ask puts q to every other node and returns their answers, and the nodes
// known that did not answer within adminWait (or before ctx ended).
func (c *cluster) ask(ctx context.Context, q *adminQuery) (replies []adminReply, silent []string) {
	want := c.known()
	if len(want) == 0 {
		return nil, nil
	}
	data, _ := json.Marshal(q)
	inbox := nats.NewInbox() // not under the response inbox: history/read.go says why
	ch := make(chan *nats.Msg, len(want)+8)
	sub, err := c.g.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, want
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.g.nc.PublishRequest(adminSubject, inbox, data); err != nil {
		return nil, want
	}
	heard := map[string]bool{}
	deadline := time.NewTimer(adminWait)
	defer deadline.Stop()
	missing := func() bool {
		for _, n := range want {
			if !heard[n] {
				return true
			}
		}
		return false
	}
	for missing() {
		select {
		case m := <-ch:
			var r adminReply
			if json.Unmarshal(m.Data, &r) != nil || r.Node.Node == c.g.nodeID || heard[r.Node.Node] {
				continue
			}
			heard[r.Node.Node] = true
			replies = append(replies, r)
		case <-deadline.C:
			return replies, unheard(want, heard)
		case <-ctx.Done():
			return replies, unheard(want, heard)
		}
	}
	return replies, nil
}

func unheard(want []string, heard map[string]bool) []string {
	var out []string
	for _, n := range want {
		if !heard[n] {
			out = append(out, n)
		}
	}
	return out
}
