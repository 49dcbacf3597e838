package pod

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/wire"
)

// tableShards spreads the node's pod table over several locks, so that
// joins in different pods do not wait on each other (as Centrifuge's Hub
// spreads its subscriptions).
const tableShards = 32

// tableShard is one lock's part of the node's pods, by name. Its map is
// made with its first pod.
type tableShard struct {
	mu   sync.Mutex
	pods map[string]*Pod
}

func (n *Node) shard(name string) *tableShard {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return &n.table[h.Sum32()%tableShards]
}

// Pod returns the pod open under name on this node, opening it unless
// Config.MaxPods are open already (the refusal says so). A pod just opened
// reads its past first: wait with WaitReady before using it (and look it
// up again when that says it died). Enter does all of that, and joins;
// call Pod alone once pods may open (HistoryOpen).
func (n *Node) Pod(name string) (*Pod, *envelope.Error) {
	s := n.shard(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pods[name]; p != nil {
		return p, nil
	}
	if limit := n.Config.MaxPods; limit > 0 && n.podCount.Load() >= int64(limit) {
		return nil, envelope.Errorf(wire.CodeOverCapacity, "the gateway serves %d pods, the limit", limit)
	}
	if s.pods == nil {
		s.pods = map[string]*Pod{}
	}
	p := New(n, name)
	s.pods[name] = p
	n.countPods(n.podCount.Add(1))
	return p, nil
}

// Lookup returns the pod open under name on this node, or nil; it opens
// none.
func (n *Node) Lookup(name string) *Pod {
	s := n.shard(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[name]
}

// Pods returns the pods open on this node, in no order.
func (n *Node) Pods() []*Pod {
	out := make([]*Pod, 0, n.podCount.Load())
	for i := range n.table {
		s := &n.table[i]
		s.mu.Lock()
		for _, p := range s.pods {
			out = append(out, p)
		}
		s.mu.Unlock()
	}
	return out
}

// Enter finds pod name, opening it when it is not open (Pod), waits until
// it has read its past, and calls join with it: the one way into a pod, for
// a connection (Reserve), an MCP session (JoinGuest), a POST or the
// operator (Acquire). join reports dead when the pod was removed as it was
// looked up (it went idle, or died, meanwhile): Enter then looks again, and
// a new pod is opened. A refusal of join is returned as it is, the pod let
// go when that left it idle; what join took (a reservation, a membership)
// the caller gives back when it is done, then calls RemoveIdle.
//
// Enter refuses, with the documented codes, while this node has no quorum
// of the history stream (no_quorum), while the stream is not open yet, at
// --max-pods, and when the pod cannot read its past in time (each
// over_capacity); such a pod is forgotten, so that the next Enter opens it
// anew.
func (n *Node) Enter(ctx context.Context, name string, join func(*Pod) (dead bool, refusal *envelope.Error)) (*Pod, *envelope.Error) {
	for {
		p, e := n.readyPod(ctx, name)
		if e != nil {
			return nil, e
		}
		dead, refusal := join(p)
		if dead {
			continue // removed as we looked it up; a new one will be made
		}
		if refusal != nil {
			n.RemoveIdle(p)
			return nil, refusal
		}
		return p, nil
	}
}

// readyPod returns the pod, open and ready (Pod, then WaitReady). A pod
// that could not read its past, or not in time, is forgotten, so that the
// next call opens it anew, and the refusal says why.
func (n *Node) readyPod(ctx context.Context, name string) (*Pod, *envelope.Error) {
	if n.NoQuorum() {
		// A member here would be told nothing (docs/protocol.md section
		// 7): it is sent to another node.
		return nil, envelope.Errorf(wire.CodeNoQuorum, "this gateway node cannot reach a quorum of the cluster's history stream: connect to another node, or try again later")
	}
	if e := n.awaitHistory(); e != nil {
		return nil, e
	}
	p, e := n.Pod(name)
	if e != nil {
		return nil, e
	}
	wctx, cancel := context.WithTimeout(ctx, openTimeout)
	err := p.WaitReady(wctx)
	cancel()
	if err == nil {
		return p, nil
	}
	n.forget(p)
	if wctx.Err() != nil || ctx.Err() != nil {
		return nil, envelope.Errorf(wire.CodeOverCapacity, "pod %q is still reading its history; try again", name)
	}
	return nil, envelope.Errorf(wire.CodeOverCapacity, "pod %q cannot be opened: %v", name, err)
}

// awaitHistory waits, openTimeout at most, until pods may open: no pod is
// made before the history stream is (HistoryOpen).
func (n *Node) awaitHistory() *envelope.Error {
	if n.HistoryOpen == nil {
		return nil
	}
	select {
	case <-n.HistoryOpen:
		return nil
	default:
	}
	t := time.NewTimer(openTimeout)
	defer t.Stop()
	select {
	case <-n.HistoryOpen:
		return nil
	case <-t.C:
		return envelope.Errorf(wire.CodeOverCapacity, "the history stream is not available yet (the cluster's JetStream is forming): %v", context.DeadlineExceeded)
	}
}

// RemoveIdle forgets p and closes it when it is idle (no member, no
// pending join, no publisher, no ban, no context), so that memory follows
// the pods in use; a pod that is not, or no longer the pod of its name, is
// left as it is. Call it when something that kept the pod ends (a leave, a
// Release, an Unreserve); Tick calls it for every pod every ten seconds.
func (n *Node) RemoveIdle(p *Pod) { n.remove(p, true) }

// forget removes a pod that died by itself (it lost its order, or could
// not read its past), so that the next Enter opens it anew.
func (n *Node) forget(p *Pod) { n.remove(p, false) }

// remove removes p from the node's table if it is still the pod of its
// name there (and, with idleOnly, if it is idle: removeIfIdle, asked
// under the shard's lock), and closes it, the shard's lock let go.
func (n *Node) remove(p *Pod, idleOnly bool) {
	s := n.shard(p.Name)
	s.mu.Lock()
	remove := s.pods[p.Name] == p && (!idleOnly || p.removeIfIdle())
	if remove {
		delete(s.pods, p.Name)
		n.countPods(n.podCount.Add(-1))
	}
	s.mu.Unlock()
	if remove {
		n.Log.Debug("pod closed", "pod", p.Name, "idle", idleOnly)
		p.Close()
	}
}

// countPods sets the node's count of open pods in /metrics.
func (n *Node) countPods(open int64) {
	if n.Metrics != nil {
		n.Metrics.PodsOpen.Set(float64(open))
	}
}

// Following reports whether the node's follower of the history stream
// runs: once started it brings every pod's messages, open here or not,
// and what it keeps of them follows the stream's first (Tick).
func (n *Node) Following() bool {
	n.followMu.Lock()
	defer n.followMu.Unlock()
	return n.follow != nil
}

// Tick is the gateway janitor's, every second, for every pod: the
// history index, and the follower's sequences (seqs.go), follow what the
// stream discarded (first is the stream's oldest sequence, 0 when it is
// not known), and every ten seconds (sweep) what waits for what will
// not come is forgotten and the idle pods are removed (a pod goes as
// soon as it is idle; this catches one whose contexts were forgotten
// meanwhile).
func (n *Node) Tick(now time.Time, first uint64, sweep bool) {
	if first > 0 {
		n.followMu.Lock()
		if n.follow != nil {
			n.follow.seqs.trim(first)
		}
		n.followMu.Unlock()
	}
	for _, p := range n.Pods() {
		p.Tick(now, first, sweep)
		if sweep {
			n.RemoveIdle(p)
		}
	}
}
