package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/envelope"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/wire"
)

// The operator's API (docs/protocol.md section 7): under /admin/, with a
// token that holds gateway/admin (admin_auth.go), an operator lists the
// pods of this node or of the cluster (admin_cluster.go asks the other
// nodes), reads one pod in full, kicks a participant out of pods, revokes
// a grant, and drains the node (drain.go). A kick and a revoke go through
// the pod's own order as wire.AdminID (pod/admin.go), so that every node
// applies them and the history keeps them.

// The bounds of the operator's API.
const (
	// adminAnswerBytes bounds one answer: a page of pods ends before it
	// (next says where the following page begins), so that 6,000 pods
	// never make one 50 MB answer.
	adminAnswerBytes = 4 << 20
	// adminDefaultLimit and adminMaxLimit are a page's pods, by default
	// and at most (?limit=).
	adminDefaultLimit = 100
	adminMaxLimit     = 1000
	// adminListMembers are the members a listing names per pod; a pod's
	// detail names up to pod.AdminListMax.
	adminListMembers = 100
	// adminBodyBytes bounds a POST's body: a kick naming 1,000 pods fits.
	adminBodyBytes = 64 << 10
	// adminMaxPods are the pods one kick may name.
	adminMaxPods = 1000
	// adminMaxGrantID bounds a revoke's grant_id (an envelope id).
	adminMaxGrantID = 256
	// adminMaxReason bounds a revoke's reason, as a kick's is bounded.
	adminMaxReason = 80
)

// hostname is the machine's name, for the nodes of an answer.
var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// adminNode is this node, as an answer names it.
func (g *Gateway) adminNode() wire.AdminNode {
	n := wire.AdminNode{Node: g.nodeID, Host: hostname(), Answered: true, Draining: g.Draining()}
	if a := g.Addr(); a != nil {
		n.Addr = a.String()
	}
	return n
}

// serveAdmin is every path under /admin/: the caller's token first, then
// the endpoint.
func (g *Gateway) serveAdmin(w http.ResponseWriter, r *http.Request) {
	op, e := g.authorizeAdmin(w, r)
	if e != nil {
		g.refuse(w, e)
		return
	}
	path := r.URL.Path
	switch {
	case path == wire.PathAdminPods:
		if g.adminMethod(w, r, http.MethodGet) {
			g.adminPods(w, r, op)
		}
	case strings.HasPrefix(path, wire.PathAdminPods+"/"):
		if g.adminMethod(w, r, http.MethodGet) {
			g.adminPod(w, r, op, strings.TrimPrefix(path, wire.PathAdminPods+"/"))
		}
	case path == wire.PathAdminKick:
		if g.adminMethod(w, r, http.MethodPost) {
			g.adminKick(w, r, op)
		}
	case path == wire.PathAdminRevoke:
		if g.adminMethod(w, r, http.MethodPost) {
			g.adminRevoke(w, r, op)
		}
	case path == wire.PathAdminDrain:
		if g.adminMethod(w, r, http.MethodPost) {
			g.adminDrain(w, r, op)
		}
	default:
		g.refuse(w, envelope.Errorf(wire.CodeNotFound,
			"%q is no endpoint of the operator's API (GET %s, GET %s/NAME, POST %s, POST %s, POST %s)",
			path, wire.PathAdminPods, wire.PathAdminPods, wire.PathAdminKick, wire.PathAdminRevoke, wire.PathAdminDrain))
	}
}

// adminMethod refuses (405) a request whose method is not want.
func (g *Gateway) adminMethod(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want {
		return true
	}
	w.Header().Set("Allow", want)
	g.refuseWith(w, http.StatusMethodNotAllowed, envelope.Errorf(wire.CodeInvalidRequest, "%s takes %s, not %s", r.URL.Path, want, r.Method))
	return false
}

// adminQueryParams reads a GET's query: the parameters known, each at
// most once; anything else is a mistake said so (a typo would otherwise
// list the wrong thing without a word).
func (g *Gateway) adminQueryParams(w http.ResponseWriter, r *http.Request, known ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "the query does not parse: %v", err))
		return nil, false
	}
	for k, vs := range q {
		switch {
		case k == "token":
			g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "the operator's API takes its token in Authorization: Bearer TOKEN, never in the URL"))
			return nil, false
		case !slices.Contains(known, k):
			g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "unknown parameter %q (%s takes %s)", k, r.URL.Path, strings.Join(known, ", ")))
			return nil, false
		case len(vs) > 1:
			g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "parameter %q is given %d times", k, len(vs)))
			return nil, false
		}
	}
	return q, true
}

// clusterParam reads ?cluster=: 1 or true asks every node.
func clusterParam(q url.Values) (bool, *envelope.Error) {
	switch v := q.Get("cluster"); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, envelope.Errorf(wire.CodeInvalidRequest, "cluster is 1 (every node of the cluster) or 0 (this node), not %q", v)
	}
}

// adminPods is GET /admin/pods[?cluster=1][&limit=N][&after=NAME].
func (g *Gateway) adminPods(w http.ResponseWriter, r *http.Request, op *operator) {
	q, ok := g.adminQueryParams(w, r, "cluster", "limit", "after")
	if !ok {
		return
	}
	cluster, e := clusterParam(q)
	if e != nil {
		g.refuse(w, e)
		return
	}
	limit := adminDefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > adminMaxLimit {
			g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "limit is 1 to %d, not %q", adminMaxLimit, v))
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !envelope.ValidPodName(after) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "after names a pod: 1 to 64 characters of [A-Za-z0-9._-]"))
		return
	}
	replies, nodes, complete := g.gather(r.Context(), &adminQuery{Op: adminOpPods, Pods: op.pods, After: after, Limit: limit}, cluster)
	pods, next := mergePods(replies, limit, adminAnswerBytes)
	writeAdmin(w, wire.AdminPods{Node: g.nodeID, Nodes: nodes, Complete: complete, Pods: pods, Next: next})
}

// adminPod is GET /admin/pods/NAME[?cluster=1].
func (g *Gateway) adminPod(w http.ResponseWriter, r *http.Request, op *operator, name string) {
	q, ok := g.adminQueryParams(w, r, "cluster")
	if !ok {
		return
	}
	cluster, e := clusterParam(q)
	if e != nil {
		g.refuse(w, e)
		return
	}
	if !envelope.ValidPodName(name) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "a pod name is 1 to 64 characters of [A-Za-z0-9._-]"))
		return
	}
	if !op.reaches(name) {
		g.refuse(w, envelope.Errorf(wire.CodeForbidden, "pods: this token may not reach pod %q", name))
		return
	}
	replies, nodes, complete := g.gather(r.Context(), &adminQuery{Op: adminOpPod, Pods: op.pods, Pod: name}, cluster)
	detail := mergeDetail(replies)
	if detail == nil {
		where := "this node"
		if cluster {
			where = "any node that answered"
		}
		g.refuse(w, envelope.Errorf(wire.CodeNotFound, "pod %q is not open on %s (nobody is in it there)", name, where))
		return
	}
	writeAdmin(w, wire.AdminPodAnswer{Node: g.nodeID, Nodes: nodes, Complete: complete, Pod: *detail})
}

// adminKick is POST /admin/kick.
func (g *Gateway) adminKick(w http.ResponseWriter, r *http.Request, op *operator) {
	var k wire.AdminKick
	if !g.adminBody(w, r, &k) {
		return
	}
	kick := wire.Kick{Participant: k.Participant, Reason: k.Reason, BanMS: k.BanMS}
	if err := pod.CheckKick(kick); err != nil {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "%v", err))
		return
	}
	if len(k.Pods) > adminMaxPods {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "pods names %d pods, more than %d: kick in several calls", len(k.Pods), adminMaxPods))
		return
	}
	for _, name := range k.Pods {
		if !envelope.ValidPodName(name) {
			g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "pods: %q is not a pod name (1 to 64 characters of [A-Za-z0-9._-])", clip(name)))
			return
		}
		if !op.reaches(name) {
			g.refuse(w, envelope.Errorf(wire.CodeForbidden, "pods: this token may not reach pod %q", name))
			return
		}
	}
	if g.Draining() {
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "this node is draining: kick through another node"))
		return
	}
	answer := wire.AdminKickAnswer{Node: g.nodeID, Participant: k.Participant, Kicks: []wire.AdminKicked{}}
	names := slices.Clone(k.Pods)
	if len(names) == 0 {
		// Wherever it is: every node says where it has it.
		replies, nodes, complete := g.gather(r.Context(), &adminQuery{Op: adminOpWhere, Pods: op.pods, Participant: k.Participant}, true)
		for _, rep := range replies {
			names = append(names, rep.Where...)
		}
		answer.Nodes, answer.Complete = nodes, complete
	} else {
		answer.Nodes, answer.Complete = []wire.AdminNode{g.adminNode()}, true
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		res := g.adminKickIn(r.Context(), name, kick)
		answer.Kicks = append(answer.Kicks, res)
		g.log.Info("operator kick", "operator", op.name(), "pod", name, "participant", k.Participant,
			"reason", k.Reason, "ban_ms", k.BanMS, "connections", res.Connections, "error", res.Error)
	}
	writeAdmin(w, answer)
}

// adminKickIn kicks in one pod, opening it on this node for the kick when
// it is not open here (its history gives its members and bans first).
func (g *Gateway) adminKickIn(ctx context.Context, name string, k wire.Kick) wire.AdminKicked {
	p, release, e := g.adminAcquire(ctx, name)
	if e != nil {
		return wire.AdminKicked{Pod: name, Error: e.Code, Message: e.Message}
	}
	defer release()
	p.SyncMembers() // its members on the other nodes, for the count
	kicked := p.AdminKick(wire.AdminID, k)
	return wire.AdminKicked{Pod: name, Connections: kicked.Connections, BannedUntil: kicked.BannedUntil}
}

// adminAcquire opens pod name on this node (or finds it open) and keeps
// it open until release, as a publish request does.
func (g *Gateway) adminAcquire(ctx context.Context, name string) (*pod.Pod, func(), *envelope.Error) {
	from := &pod.Sender{ID: wire.AdminID, Protocol: wire.ProtocolMCPP}
	for {
		p, e := g.readyPod(ctx, name)
		if e != nil {
			return nil, nil, e
		}
		dead, refusal := p.Acquire(from)
		if refusal != nil {
			return nil, nil, refusal // never: nobody bans system:admin
		}
		if !dead {
			return p, func() {
				p.Release(from)
				g.maybeRemovePod(p)
			}, nil
		}
		// Removed as we looked it up; a new one will be made.
	}
}

// adminRevoke is POST /admin/revoke.
func (g *Gateway) adminRevoke(w http.ResponseWriter, r *http.Request, op *operator) {
	var rv wire.AdminRevoke
	if !g.adminBody(w, r, &rv) {
		return
	}
	switch {
	case !envelope.ValidPodName(rv.Pod):
		g.refuse(w, envelope.Errorf(wire.CodeInvalidPod, "pod must be a pod name: 1 to 64 characters of [A-Za-z0-9._-]"))
		return
	case rv.GrantID == "" || len(rv.GrantID) > adminMaxGrantID:
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "grant_id names the grant (its capability/grant envelope's id): 1 to %d bytes", adminMaxGrantID))
		return
	case len(rv.Reason) > adminMaxReason:
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "reason is over %d bytes", adminMaxReason))
		return
	case !op.reaches(rv.Pod):
		g.refuse(w, envelope.Errorf(wire.CodeForbidden, "pods: this token may not reach pod %q", rv.Pod))
		return
	case g.Draining():
		g.refuse(w, envelope.Errorf(wire.CodeShuttingDown, "this node is draining: revoke through another node"))
		return
	}
	p, release, e := g.adminAcquire(r.Context(), rv.Pod)
	if e != nil {
		g.refuse(w, e)
		return
	}
	defer release()
	ev, e := p.AdminRevoke(wire.AdminID, rv.GrantID, rv.Reason)
	if e != nil {
		g.refuse(w, e)
		return
	}
	g.log.Info("operator revoke", "operator", op.name(), "pod", rv.Pod, "grant", rv.GrantID,
		"recipient", ev.Recipient, "grantor", ev.Grantor, "reason", rv.Reason)
	writeAdmin(w, wire.AdminRevokeAnswer{Node: g.nodeID, Pod: rv.Pod, By: wire.AdminID, Revoked: ev})
}

// adminDrain is POST /admin/drain: the node drains as on SIGTERM, and the
// answer comes once it has (within --shutdown-timeout).
func (g *Gateway) adminDrain(w http.ResponseWriter, r *http.Request, op *operator) {
	var none struct{}
	if !g.adminBody(w, r, &none) {
		return
	}
	if !op.everyPod() {
		g.refuse(w, envelope.Errorf(wire.CodeForbidden, "pods: a drain closes the connections of every pod on the node, and this token does not reach every pod (its pods do not include \"*\")"))
		return
	}
	type outcome struct {
		res   drainResult
		first bool
	}
	done := make(chan outcome, 1)
	go func() {
		// The drain runs to its end whether or not the caller waits.
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
		defer cancel()
		res, first := g.drain(ctx)
		if first {
			g.log.Info("operator drain: the node accepts nothing more, and closed its connections with 1001", "operator", op.name(),
				"connections", res.connections, "dropped", res.dropped, "took", res.took.String())
		}
		done <- outcome{res, first}
	}()
	select {
	case o := <-done:
		node := g.adminNode()
		writeAdmin(w, wire.AdminDrainAnswer{Node: g.nodeID, Host: node.Host, Addr: node.Addr, Draining: true, Already: !o.first,
			Connections: o.res.connections, Dropped: o.res.dropped, MS: o.res.took.Milliseconds()})
	case <-r.Context().Done():
	}
}

// adminBody reads a POST's JSON body into v, strictly: the JSON type
// (application/json, which a web page's form cannot send), at most
// adminBodyBytes, one object whose keys are v's fields exactly (case
// included, none twice). An empty body reads as {}.
func (g *Gateway) adminBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if lines, ok := bodyType(r.Header.Get("Content-Type")); !ok || lines {
		g.refuseWith(w, http.StatusUnsupportedMediaType, envelope.Errorf(wire.CodeInvalidJSON,
			"Content-Type must be application/json, not %q", r.Header.Get("Content-Type")))
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, adminBodyBytes+1))
	if err != nil {
		return false // the client went away
	}
	if len(body) > adminBodyBytes {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidJSON, "the body is over %d bytes", adminBodyBytes))
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	if !json.Valid(body) {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidJSON, "the body is not one JSON value"))
		return false
	}
	if path, first, second, amb := capability.Ambiguous(body); amb {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "%s: keys %q and %q are one key, twice", path, first, second))
		return false
	}
	if err := envelope.DecodePayload(body, v, true); err != nil {
		g.refuse(w, envelope.Errorf(wire.CodeInvalidRequest, "the body does not fit %s: %v", r.URL.Path, err))
		return false
	}
	return true
}

// writeAdmin writes an answer of the operator's API.
func writeAdmin(w http.ResponseWriter, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// clip shortens what a refusal quotes of the caller's input.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// gather answers q on this node and, with cluster, asks every other node
// (admin_cluster.go): the replies of the nodes that answered, this
// node's first, then the others' by node id; every node asked, answered
// or not; and whether all answered.
func (g *Gateway) gather(ctx context.Context, q *adminQuery, cluster bool) ([]adminReply, []wire.AdminNode, bool) {
	asked := cluster && g.cluster != nil
	local := g.adminLocal(q, !asked, adminAnswerBytes)
	replies, nodes, complete := []adminReply{local}, []wire.AdminNode{local.Node}, true
	if !asked {
		return replies, nodes, complete
	}
	others, silent := g.cluster.ask(ctx, q)
	slices.SortFunc(others, func(a, b adminReply) int { return strings.Compare(a.Node.Node, b.Node.Node) })
	for _, rep := range others {
		nodes = append(nodes, rep.Node)
		if !rep.Node.Answered {
			complete = false
			continue
		}
		replies = append(replies, rep)
	}
	for _, n := range silent {
		nodes = append(nodes, wire.AdminNode{Node: n, Error: fmt.Sprintf("no answer within %v", adminWait)})
		complete = false
	}
	return replies, nodes, complete
}

// adminLocal is this node's part of q: its pods' views with its own
// members, and with remote those of other nodes it knows of too (when it
// answers alone).
func (g *Gateway) adminLocal(q *adminQuery, remote bool, maxBytes int) adminReply {
	reply := adminReply{Node: g.adminNode()}
	op := &operator{pods: q.Pods}
	switch q.Op {
	case adminOpPods:
		reply.Pods, reply.More = g.adminPage(op, q.After, q.Limit, remote, maxBytes)
	case adminOpPod:
		if p := g.lookupPod(q.Pod); p != nil && op.reaches(q.Pod) {
			v := p.AdminView(remote, pod.AdminListMax, true)
			v.Nodes = []string{g.nodeID}
			reply.Pod = &v
		}
	case adminOpWhere:
		for _, p := range g.allPods() {
			if op.reaches(p.Name) && p.LocalMember(q.Participant) {
				reply.Where = append(reply.Where, p.Name)
			}
		}
	default:
		reply.Node.Answered, reply.Node.Error = false, fmt.Sprintf("unknown question %q (a node of another version?)", q.Op)
	}
	return reply
}

// adminPage is a page of this node's open pods that op reaches, by name,
// after after: at most limit pods, and fewer when maxBytes would be
// passed; more says whether pods follow.
func (g *Gateway) adminPage(op *operator, after string, limit int, remote bool, maxBytes int) ([]wire.AdminPod, bool) {
	byName := map[string]*pod.Pod{}
	var names []string
	for _, p := range g.allPods() {
		if p.Name > after && op.reaches(p.Name) {
			byName[p.Name] = p
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	out := []wire.AdminPod{}
	size := 0
	for _, name := range names {
		if len(out) == limit {
			return out, true
		}
		v := byName[name].AdminView(remote, adminListMembers, false).AdminPod
		v.Nodes = []string{g.nodeID}
		b, _ := json.Marshal(v)
		if len(out) > 0 && size+len(b) > maxBytes {
			return out, true
		}
		size += len(b) + 1
		out = append(out, v)
	}
	return out, false
}

// mergePods makes one page of the nodes' pages. A node that has more pods
// than it sent may have some the others did not send before its last:
// the page stops at the first of the nodes' last names that say more, so
// that no pod is skipped, and at limit and maxBytes. Each pod's members
// are every node's own; its pod-wide state (contexts, proposals, grants,
// bans, the same on every node, which apply them in the pod's order) is
// the first node's that has it.
func mergePods(replies []adminReply, limit, maxBytes int) ([]wire.AdminPod, *string) {
	cut, cutting := "", false
	byName := map[string]*wire.AdminPod{}
	var names []string
	for _, rep := range replies {
		if rep.More && len(rep.Pods) > 0 {
			if last := rep.Pods[len(rep.Pods)-1].Name; !cutting || last < cut {
				cut, cutting = last, true
			}
		}
		for _, p := range rep.Pods {
			m := byName[p.Name]
			if m == nil {
				c := p
				c.Members = slices.Clone(p.Members)
				byName[p.Name] = &c
				names = append(names, p.Name)
				continue
			}
			m.Nodes = append(m.Nodes, p.Nodes...)
			m.Members = append(m.Members, p.Members...)
			m.MemberCount += p.MemberCount
			m.Observers += p.Observers
		}
	}
	slices.Sort(names)
	out := []wire.AdminPod{}
	size, more := 0, cutting // a node with more has pods after the page
	for _, name := range names {
		if cutting && name > cut || len(out) == limit {
			more = true
			break
		}
		p := byName[name]
		slices.SortFunc(p.Members, func(a, b wire.AdminMember) int { return strings.Compare(a.ID, b.ID) })
		p.Members = p.Members[:min(len(p.Members), adminListMembers)]
		b, _ := json.Marshal(p)
		if len(out) > 0 && size+len(b) > maxBytes {
			more = true
			break
		}
		size += len(b) + 1
		out = append(out, *p)
	}
	if !more || len(out) == 0 {
		return out, nil
	}
	next := out[len(out)-1].Name
	return out, &next
}

// mergeDetail makes one pod's detail of the nodes' (nil when no node has
// it open): every node's own members, the first node's pod-wide lists.
func mergeDetail(replies []adminReply) *wire.AdminPodDetail {
	var out *wire.AdminPodDetail
	for _, rep := range replies {
		if rep.Pod == nil {
			continue
		}
		if out == nil {
			d := *rep.Pod
			d.Members = slices.Clone(d.Members)
			out = &d
			continue
		}
		out.Nodes = append(out.Nodes, rep.Pod.Nodes...)
		out.Members = append(out.Members, rep.Pod.Members...)
		out.MemberCount += rep.Pod.MemberCount
		out.Observers += rep.Pod.Observers
	}
	if out != nil {
		slices.SortFunc(out.Members, func(a, b wire.AdminMember) int { return strings.Compare(a.ID, b.ID) })
		out.Members = out.Members[:min(len(out.Members), pod.AdminListMax)]
	}
	return out
}
