package gateway

import (
	"encoding/json"
	"fmt"
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
//     membersSubject, so that its first welcome lists the whole pod; it
//     waits for the nodes it knows that have not fallen silent; the
//     lists that come after that wait are applied as they come, up to
//     membersLate;
//   - a node heard from that was not known (new, or taken for gone and
//     heard again) is asked for its members of every pod open here, on
//     membersSubject.<node> (resync), and the members here are told who
//     came and who left;
//   - join and leave frames of other nodes keep that list current, and a
//     join of an id that is connected here replaces the connection here
//     (close 4000, no presence change);
//   - the operator's API asks every node for its part of an answer on
//     adminSubject (admin_cluster.go).
//
// Each list carries the number of the last frame its node had put into a
// pod's log when it answered, so that a list older than a presence frame
// of its node already applied is not applied (pod.Pod.ApplyMembers).
const (
	heartbeatSubject = "mcpp.nodes.heartbeat"
	membersSubject   = "mcpp.nodes.members"
	missedHeartbeats = 3
	// silentHeartbeats is how many heartbeats a node may miss before a
	// pod's opening stops waiting for its member list (Members): a node
	// killed was waited for 5 s by every pod opened in the 3 heartbeats
	// before it was taken for gone, and a join storm's dials, each behind
	// such an opening, ran out the clients' 10 s (issue 38's full-size run
	// 37).
	silentHeartbeats = 2
	// membersLook is how often a pod's opening looks whether a node it
	// waits for fell silent.
	membersLook = 100 * time.Millisecond
	// membersWait bounds how long opening a pod waits for the other nodes'
	// member lists. The wait ends when every known node has answered (a
	// few milliseconds when they are not busy); 500 ms was too short in a
	// join storm of 9,000 members on 2 cores, where a busy node answered
	// later and the welcomes of the node that asked missed its members.
	membersWait = 5 * time.Second
	// membersLate is how long a node that opened a pod still takes the
	// lists of the nodes that had not answered within membersWait.
	membersLate = time.Minute
	// resyncBatch bounds the pods one ask of a node's members names, so
	// that its answer stays well under NATS's largest message.
	resyncBatch = 256
)

// cluster is a node's view of the other nodes.
type cluster struct {
	g     *Gateway
	mu    sync.Mutex
	nodes map[string]time.Time // other nodes, last heard from
	// lastTick is when the heartbeat loop last ran: a node that did not
	// run for a while (its process was paused) heard nobody meanwhile.
	lastTick time.Time
	subs     []*nats.Subscription
	stop     chan struct{}
	done     chan struct{}
	// removing holds, by node taken for gone, a channel closed once its
	// members are out of every pod here. expire hands that work to a
	// goroutine: done on the heartbeat loop, it held the loop up to 11 s
	// (a thousand pods, each taken in turn), the node sent no heartbeat
	// meanwhile, and the others took it for gone in turn and removed its
	// members from their views (issue 38's full-size run 43). A resync of
	// the node, heard again, waits for it, so that a list is never undone
	// by a removal that began before it.
	removing map[string]chan struct{}
	// removeFromPods removes node's members from every pod here
	// (removeFromPods, but in tests).
	removeFromPods func(node string)
}

// membersReply is a node's answer to a members request: its members of
// one pod (Node, Seq, Members), or of several (Pods).
type membersReply struct {
	Node    string          `json:"node"`
	Seq     uint64          `json:"seq"`
	Members []wire.Identity `json:"members,omitempty"`
	Since   []time.Time     `json:"since,omitempty"`
	Pods    []podMembers    `json:"pods,omitempty"`
}

// podMembers are a node's members of one pod, as of its frame Seq.
type podMembers struct {
	Pod     string          `json:"pod"`
	Seq     uint64          `json:"seq"`
	Members []wire.Identity `json:"members"`
	Since   []time.Time     `json:"since,omitempty"`
}

// membersAsk is a request of one node's members of several pods.
type membersAsk struct {
	Pods []string `json:"pods"`
}

func startCluster(g *Gateway) (*cluster, error) {
	c := &cluster{g: g, nodes: map[string]time.Time{}, lastTick: time.Now(), stop: make(chan struct{}), done: make(chan struct{}),
		removing: map[string]chan struct{}{}}
	c.removeFromPods = c.removeFromEveryPod
	for subject, handle := range map[string]nats.MsgHandler{
		heartbeatSubject:                c.onHeartbeat,
		membersSubject:                  c.onMembersRequest,
		membersSubject + "." + g.nodeID: c.onMembersAsk,
		adminSubject:                    c.onAdminRequest,
	} {
		sub, err := g.nc.Subscribe(subject, handle)
		if err != nil {
			for _, s := range c.subs {
				_ = s.Unsubscribe()
			}
			return nil, err
		}
		c.subs = append(c.subs, sub)
	}
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
		go c.resync(node)
	}
}

// Seen records activity of a node that sent a frame (pod.Cluster). It is
// called with a pod's lock held: a node it did not know is asked for its
// members on a goroutine of its own.
func (c *cluster) Seen(node string) {
	c.mu.Lock()
	_, known := c.nodes[node]
	if !known {
		c.nodes[node] = time.Now()
	}
	c.mu.Unlock()
	if !known {
		go c.resync(node)
	}
}

// expire takes the nodes not heard from for after for gone. A node whose
// own loop did not run for longer than that (its process was paused, or
// starved) heard nobody meanwhile, so it judges nobody: it gives every
// node after again.
func (c *cluster) expire(now time.Time, after time.Duration) {
	var gone []string
	c.mu.Lock()
	stalled := now.Sub(c.lastTick)
	c.lastTick = now
	if stalled > after {
		for node := range c.nodes {
			c.nodes[node] = now
		}
		c.mu.Unlock()
		c.g.log.Warn("this gateway node did not run for a while: the others are given their heartbeats again", "stalled", stalled.Round(time.Millisecond).String())
		return
	}
	for node, at := range c.nodes {
		if now.Sub(at) > after {
			gone = append(gone, node)
			delete(c.nodes, node)
			done := make(chan struct{})
			go c.remove(node, c.removing[node], done)
			c.removing[node] = done
		}
	}
	c.mu.Unlock()
	for _, node := range gone {
		c.g.log.Warn("gateway node gone: no heartbeat", "node", node, "after", after.String())
	}
}

// remove takes node's members out of every pod here, after the removal
// of the node before it (before: nil when none), and closes done.
func (c *cluster) remove(node string, before, done chan struct{}) {
	if before != nil {
		<-before
	}
	c.removeFromPods(node)
	c.mu.Lock()
	if c.removing[node] == done {
		delete(c.removing, node)
	}
	c.mu.Unlock()
	close(done)
}

// removeFromEveryPod is removeFromPods: every pod here forgets node's
// members and tells its own that they left.
func (c *cluster) removeFromEveryPod(node string) {
	for _, p := range c.g.node.Pods() {
		p.RemoveNode(node)
	}
}

// removed waits until node's members are out of every pod here, when
// expire took it for gone; false when the cluster stopped first.
func (c *cluster) removed(node string) bool {
	c.mu.Lock()
	done := c.removing[node]
	c.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-c.stop:
		return false
	}
}

// peers are the other nodes known now.
func (c *cluster) peers() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.nodes))
	for node := range c.nodes {
		out[node] = true
	}
	return out
}

// silent reports whether node is no longer known, or has not been heard
// from for silentHeartbeats heartbeats: gone, or about to be taken for
// gone, so that nothing waits for its answer.
func (c *cluster) silent(node string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, known := c.nodes[node]
	return !known || now.Sub(at) > time.Duration(silentHeartbeats)*c.g.cfg.ClusterHeartbeat
}

// roster is this node's members of pod name, for another node.
func (c *cluster) roster(name string) pod.NodeMembers {
	if p := c.g.node.Lookup(name); p != nil {
		// Its connections and its guests (MCP participants) alike.
		return p.Roster()
	}
	return c.g.node.Roster()
}

func (c *cluster) onMembersRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	r := c.roster(string(m.Data))
	b, _ := json.Marshal(membersReply{Node: c.g.nodeID, Seq: r.Seq, Members: nonNil(r.Members), Since: r.Since})
	_ = m.Respond(b)
}

// onMembersAsk answers another node's ask of this node's members of
// several pods (resync).
func (c *cluster) onMembersAsk(m *nats.Msg) {
	var ask membersAsk
	if m.Reply == "" || json.Unmarshal(m.Data, &ask) != nil {
		return
	}
	reply := membersReply{Node: c.g.nodeID, Pods: make([]podMembers, 0, len(ask.Pods))}
	for _, name := range ask.Pods {
		r := c.roster(name)
		reply.Pods = append(reply.Pods, podMembers{Pod: name, Seq: r.Seq, Members: nonNil(r.Members), Since: r.Since})
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

func nonNil(ids []wire.Identity) []wire.Identity {
	if ids == nil {
		return []wire.Identity{}
	}
	return ids
}

// Members asks every other node for its members of pod, waiting until all
// known nodes answered or fell silent (silentHeartbeats), or membersWait
// passed; the answers that come later, up to membersLate, are handed to
// late (pod.Cluster). A node not known here that answers (one taken for
// gone that is back, or one that started and has not been heard yet) has
// its list taken too, and the wait goes on for the known ones: counted in
// their place, its answer made the wait end before theirs, and their
// lists were lost (issue 38's full-size runs 36, 38 and 39: a member
// welcomed without the members of another node).
func (c *cluster) Members(name string, late func(pod.NodeMembers)) []pod.NodeMembers {
	want := c.peers() // the known nodes still waited for
	if len(want) == 0 {
		return nil
	}
	known := len(want)
	inbox := nats.NewInbox() // not under the response inbox: history/read.go says why
	ch := make(chan *nats.Msg, len(want)+8)
	sub, err := c.g.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil
	}
	if err := c.g.nc.PublishRequest(membersSubject, inbox, []byte(name)); err != nil {
		_ = sub.Unsubscribe()
		return nil
	}
	var out []pod.NodeMembers
	heard := map[string]bool{}
	take := func(m *nats.Msg) (pod.NodeMembers, bool) {
		var r membersReply
		if json.Unmarshal(m.Data, &r) != nil || r.Node == c.g.nodeID || heard[r.Node] {
			return pod.NodeMembers{}, false
		}
		heard[r.Node] = true
		delete(want, r.Node)
		return pod.NodeMembers{Node: r.Node, Seq: r.Seq, Members: r.Members, Since: r.Since}, true
	}
	// The lists that come after the wait are applied as they come.
	listenLate := func() {
		defer func() { _ = sub.Unsubscribe() }()
		until := time.NewTimer(membersLate)
		defer until.Stop()
		for {
			select {
			case m := <-ch:
				if r, ok := take(m); ok {
					c.g.log.Info("a gateway node answered for its members late", "pod", name, "node", r.Node)
					late(r)
				}
			case <-until.C:
				return
			case <-c.stop:
				return
			}
		}
	}
	deadline := time.NewTimer(membersWait)
	defer deadline.Stop()
	// A known node that falls silent while it is waited for (killed) is
	// waited for no longer.
	look := time.NewTicker(membersLook)
	defer look.Stop()
	silent := 0
	for len(want) > 0 {
		select {
		case m := <-ch:
			if r, ok := take(m); ok {
				out = append(out, r)
			}
		case now := <-look.C:
			for node := range want {
				if c.silent(node, now) {
					delete(want, node)
					silent++
				}
			}
		case <-deadline.C:
			c.g.log.Warn("opening a pod: some gateway nodes did not answer for their members in time; their lists are applied when they come",
				"pod", name, "answered", known-len(want)-silent, "nodes", known-silent, "waited", membersWait.String())
			go listenLate()
			return out
		}
	}
	if silent > 0 {
		go listenLate()
	} else {
		_ = sub.Unsubscribe()
	}
	return out
}

// Ask asks node for its members of pods (pod.Cluster).
func (c *cluster) Ask(node string, pods []string) ([]pod.NodeMembers, error) {
	b, _ := json.Marshal(membersAsk{Pods: pods})
	m, err := c.g.nc.Request(membersSubject+"."+node, b, membersWait)
	if err != nil {
		return nil, fmt.Errorf("asking node %s for its members: %w", node, err)
	}
	var r membersReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("node %s's members: %w", node, err)
	}
	out := make([]pod.NodeMembers, 0, len(r.Pods))
	for _, pm := range r.Pods {
		out = append(out, pod.NodeMembers{Node: r.Node, Seq: pm.Seq, Members: pm.Members, Since: pm.Since})
	}
	return out, nil
}

// resync asks node, heard from and not known until now (new, or taken for
// gone and heard again), for its members of every pod open here, and
// applies them: its members that this node took for gone come back, and
// the members here are told, once, who came and who left. A pod whose
// list came stale asks again (pod.Pod.ApplyMembers).
func (c *cluster) resync(node string) {
	if !c.removed(node) {
		return
	}
	var pods []*pod.Pod
	for _, p := range c.g.node.Pods() {
		if p.Ready() {
			pods = append(pods, p)
		}
	}
	for len(pods) > 0 {
		batch := pods[:min(resyncBatch, len(pods))]
		pods = pods[len(batch):]
		names := make([]string, len(batch))
		for i, p := range batch {
			names[i] = p.Name
		}
		lists, err := c.askUntil(node, names)
		if err != nil {
			c.g.log.Warn("a gateway node heard again is gone again before it answered for its members", "node", node, "err", err)
			return
		}
		for i, p := range batch {
			if !p.ApplyMembers(lists[i]) {
				go p.AskMembers(node)
			}
		}
	}
}

// resyncWarn is how long resync asks a node heard again that does not
// answer before it logs so (right after routes come back, NATS may not
// have carried the node's subscriptions over them yet, "no responders";
// a node busy reading its stream again answers late). It goes on asking
// while the node is known: until it answers, the node's members that
// this node took for gone are missing from the views here.
const resyncWarn = 30 * time.Second

// askUntil is Ask, asked again (every 100 ms at first, then every 2 s)
// while it fails and node is known.
func (c *cluster) askUntil(node string, names []string) ([]pod.NodeMembers, error) {
	warn := time.Now().Add(resyncWarn)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		lists, err := c.Ask(node, names)
		if err == nil && len(lists) != len(names) {
			err = fmt.Errorf("node %s answered for %d pods of %d", node, len(lists), len(names))
		}
		if err == nil {
			return lists, nil
		}
		c.mu.Lock()
		_, known := c.nodes[node]
		c.mu.Unlock()
		if !known {
			return nil, err
		}
		if !warn.IsZero() && time.Now().After(warn) {
			warn = time.Time{}
			c.g.log.Warn("a gateway node heard again does not answer for its members yet; asking on", "node", node, "err", err)
		}
		select {
		case <-c.stop:
			return nil, err
		case <-time.After(wait):
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
