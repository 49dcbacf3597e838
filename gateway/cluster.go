package gateway

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// Several gateway nodes serve one set of pods over NATS (docs/protocol.md
// section 7). Envelopes need nothing more than the pod subjects: each node
// subscribes once per pod and fans out to its own participants. What this
// file adds is who is where:
//
//   - every node publishes a heartbeat on heartbeatSubject every
//     --cluster-heartbeat; a node not heard from for missedHeartbeats of
//     them is gone, and every other node announces its participants as
//     having left, to its own participants;
//   - a node that opens a pod asks the others for their members of it on
//     membersSubject, so that its first welcome lists the whole pod;
//   - join and leave frames of other nodes keep that list current, and a
//     join of an id that is connected here replaces the connection here
//     (close 4000, no presence change);
//   - the operator's API asks every node for its part of an answer on
//     adminSubject (admin_cluster.go).
const (
	heartbeatSubject = "mcpp.nodes.heartbeat"
	membersSubject   = "mcpp.nodes.members"
	missedHeartbeats = 3
	// membersWait bounds how long opening a pod waits for the other nodes'
	// member lists. The wait ends when every known node has answered (a
	// few milliseconds when they are not busy); 500 ms was too short in a
	// join storm of 9,000 members on 2 cores, where a busy node answered
	// later and the welcomes of the node that asked missed its members.
	membersWait = 5 * time.Second
)

// cluster is a node's view of the other nodes.
type cluster struct {
	g     *Gateway
	mu    sync.Mutex
	nodes map[string]time.Time // other nodes, last heard from
	subs  []*nats.Subscription
	stop  chan struct{}
	done  chan struct{}
}

// membersReply is a node's answer to a members request.
type membersReply struct {
	Node    string          `json:"node"`
	Members []wire.Identity `json:"members"`
}

func startCluster(g *Gateway) (*cluster, error) {
	c := &cluster{g: g, nodes: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	hb, err := g.nc.Subscribe(heartbeatSubject, c.onHeartbeat)
	if err != nil {
		return nil, err
	}
	mem, err := g.nc.Subscribe(membersSubject, c.onMembersRequest)
	if err != nil {
		_ = hb.Unsubscribe()
		return nil, err
	}
	adm, err := g.nc.Subscribe(adminSubject, c.onAdminRequest)
	if err != nil {
		_ = hb.Unsubscribe()
		_ = mem.Unsubscribe()
		return nil, err
	}
	c.subs = []*nats.Subscription{hb, mem, adm}
	_ = g.nc.Flush()
	go c.run()
	return c, nil
}

func (c *cluster) run() {
	defer close(c.done)
	every := c.g.cfg.ClusterHeartbeat
	t := time.NewTicker(every)
	defer t.Stop()
	c.beat()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.beat()
			c.expire(now, time.Duration(missedHeartbeats)*every)
		}
	}
}

func (c *cluster) beat() {
	_ = c.g.nc.Publish(heartbeatSubject, []byte(c.g.nodeID))
}

func (c *cluster) onHeartbeat(m *nats.Msg) {
	node := string(m.Data)
	if node == c.g.nodeID {
		return
	}
	c.mu.Lock()
	_, known := c.nodes[node]
	c.nodes[node] = time.Now()
	c.mu.Unlock()
	if !known {
		c.g.log.Info("gateway node joined", "node", node)
		c.beat() // so that a new node learns of this one at once
	}
}

// Seen records activity of a node that sent a frame (pod.Cluster).
func (c *cluster) Seen(node string) {
	c.mu.Lock()
	if _, ok := c.nodes[node]; !ok {
		c.nodes[node] = time.Now()
	}
	c.mu.Unlock()
}

func (c *cluster) expire(now time.Time, after time.Duration) {
	var gone []string
	c.mu.Lock()
	for node, at := range c.nodes {
		if now.Sub(at) > after {
			gone = append(gone, node)
			delete(c.nodes, node)
		}
	}
	c.mu.Unlock()
	for _, node := range gone {
		c.g.log.Warn("gateway node gone: no heartbeat", "node", node, "after", after.String())
		for _, p := range c.g.allPods() {
			p.RemoveNode(node)
		}
	}
}

func (c *cluster) peers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

func (c *cluster) onMembersRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	reply := membersReply{Node: c.g.nodeID, Members: []wire.Identity{}}
	if p := c.g.lookupPod(string(m.Data)); p != nil {
		// Its connections and its guests (MCP participants) alike.
		reply.Members = p.LocalIdentities()
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

// Members asks every other node for its members of pod, waiting until all
// known nodes answered or membersWait passed (pod.Cluster).
func (c *cluster) Members(name string) []pod.NodeMembers {
	want := c.peers()
	if want == 0 {
		return nil
	}
	inbox := c.g.nc.NewRespInbox()
	ch := make(chan *nats.Msg, want+8)
	sub, err := c.g.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.g.nc.PublishRequest(membersSubject, inbox, []byte(name)); err != nil {
		return nil
	}
	var out []pod.NodeMembers
	deadline := time.After(membersWait)
	for {
		select {
		case m := <-ch:
			var r membersReply
			if json.Unmarshal(m.Data, &r) == nil && r.Node != c.g.nodeID {
				out = append(out, pod.NodeMembers{Node: r.Node, Members: r.Members})
				if len(out) >= want {
					return out
				}
			}
		case <-deadline:
			return out
		}
	}
}

func (c *cluster) close() {
	close(c.stop)
	<-c.done
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
}
