package integration

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// Issue 37: the operator's API of a cluster. The listing asks every node
// (NATS request/reply) and shows every node's members; a kick on node 1
// closes a participant on node 3, in every pod where it is; a node that
// does not answer is named, never left out silently; and the other nodes
// refuse the API without the capability as the first does.
func TestAdminCluster(t *testing.T) {
	tokens := harness.WriteFile(t, "tokens.json", `{"tokens": [
  {"token": "ops-t", "participant": "ops", "capabilities": ["gateway/admin"], "pods": ["*"]},
  {"token": "mod-t", "participant": "mod", "capabilities": ["*"], "pods": ["*"]},
  {"token": "alice-t", "participant": "alice", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "carol-t", "participant": "carol", "capabilities": ["chat"], "pods": ["*"]},
  {"token": "dave-t", "participant": "dave", "capabilities": ["chat"], "pods": ["*"]},
  `+probeTokens+`
]}`)
	// A heartbeat of 2 s: a node that stops answering stays known for 6 s,
	// long enough for a listing to ask it and name it.
	nodes := startCluster(t, 3, "--tokens", tokens, "--cluster-heartbeat", "2s")
	n1, n2, n3 := nodes[0].GW, nodes[1].GW, nodes[2].GW
	ids := make([]string, 3)
	for i, n := range nodes {
		ans, _ := listPods(t, n.GW.URL, "ops-t", "")
		ids[i] = ans.Node
	}

	alice := n1.DialToken(t, "cl-a", "alice-t", true, "")
	dave := n3.DialToken(t, "cl-a", "dave-t", true, "")
	daveB := n3.DialToken(t, "cl-b", "dave-t", true, "")
	carol := n2.DialToken(t, "cl-c", "carol-t", true, "")
	alice.AwaitPresence("join", "dave", 10*time.Second)

	// The listing on node 1 shows every node's members, each with its
	// node, and says every node answered.
	var ans wire.AdminPods
	var pods map[string]wire.AdminPod
	harness.Eventually(t, 20*time.Second, "a listing of every node", func() bool {
		ans, pods = listPods(t, n1.URL, "ops-t", "?cluster=1")
		_, a := pods["cl-a"]
		_, b := pods["cl-b"]
		_, c := pods["cl-c"]
		return ans.Complete && len(ans.Nodes) == 3 && a && b && c && len(pods["cl-a"].Members) == 2
	})
	for i, n := range ans.Nodes {
		if !n.Answered || !slices.Contains(ids, n.Node) || n.Addr == "" {
			t.Fatalf("node %d of the listing: %+v (the nodes are %v)", i, n, ids)
		}
	}
	if ans.Nodes[0].Node != ids[0] {
		t.Fatalf("the listing's first node is %s, not the one asked (%s)", ans.Nodes[0].Node, ids[0])
	}
	memberNodes := func(p wire.AdminPod) map[string]string {
		out := map[string]string{}
		for _, m := range p.Members {
			out[m.ID] = m.Node
			if m.Since == nil || m.Queue == nil || m.Via == nil {
				t.Errorf("member %s of %s, from its own node, lacks its node's details: %+v", m.ID, p.Name, m)
			}
		}
		return out
	}
	if got := memberNodes(pods["cl-a"]); len(got) != 2 || got["alice"] != ids[0] || got["dave"] != ids[2] || pods["cl-a"].MemberCount != 2 ||
		!slices.Contains(pods["cl-a"].Nodes, ids[0]) || !slices.Contains(pods["cl-a"].Nodes, ids[2]) {
		t.Fatalf("cl-a across the cluster: %+v (nodes %v)", pods["cl-a"], ids)
	}
	if got := memberNodes(pods["cl-b"]); len(got) != 1 || got["dave"] != ids[2] {
		t.Fatalf("cl-b across the cluster: %+v", pods["cl-b"])
	}
	if got := memberNodes(pods["cl-c"]); len(got) != 1 || got["carol"] != ids[1] {
		t.Fatalf("cl-c across the cluster: %+v", pods["cl-c"])
	}
	// Pages of one pod walk the cluster's pods, none skipped or twice.
	var walked []string
	for after := ""; ; {
		q := "?cluster=1&limit=1"
		if after != "" {
			q += "&after=" + after
		}
		page, _ := listPods(t, n2.URL, "ops-t", q)
		for _, p := range page.Pods {
			if strings.HasPrefix(p.Name, "cl-") {
				walked = append(walked, p.Name)
			}
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	if !slices.Equal(walked, []string{"cl-a", "cl-b", "cl-c"}) {
		t.Fatalf("the pages of one pod walked %v", walked)
	}
	// One pod in full, from node 2, where nobody is in it.
	var detail wire.AdminPodAnswer
	adminCall(t, n2.URL, http.MethodGet, wire.PathAdminPods+"/cl-a?cluster=1", "ops-t", nil).into(t, "cl-a in full from node 2", &detail)
	if got := memberIDs(detail.Pod.Members); !slices.Equal(got, []string{"alice", "dave"}) || !detail.Complete {
		t.Fatalf("cl-a in full from node 2: %+v", detail)
	}
	if a := adminCall(t, n2.URL, http.MethodGet, wire.PathAdminPods+"/cl-a", "ops-t", nil); a.status != http.StatusNotFound {
		t.Fatalf("cl-a on node 2 alone, where it is not open: %d %s", a.status, a.body)
	}

	// The other nodes refuse as the first: no token, a participant's, "*".
	for _, n := range []*harness.Gateway{n2, n3} {
		for _, c := range []struct {
			token  string
			status int
		}{{"", http.StatusUnauthorized}, {"alice-t", http.StatusForbidden}, {"mod-t", http.StatusForbidden}} {
			for _, e := range adminEndpoints {
				if a := adminCall(t, n.URL, e.method, e.path, c.token, e.body); a.status != c.status {
					t.Errorf("%s %s on another node with %q: %d %s", e.method, e.path, c.token, a.status, a.body)
				}
			}
		}
		kick := adminCall(t, n.URL, http.MethodPost, wire.PathAdminKick, "mod-t", wire.AdminKick{Participant: "dave"})
		if kick.status != http.StatusForbidden || !dave.IsOpen() {
			t.Fatalf("a kick without the capability on another node: %d, dave open %v", kick.status, dave.IsOpen())
		}
	}

	// A kick on node 1 of dave, who is on node 3 in two pods (one not
	// open on node 1): both of his connections there close with 4410.
	var kicked wire.AdminKickAnswer
	adminCall(t, n1.URL, http.MethodPost, wire.PathAdminKick, "ops-t", wire.AdminKick{Participant: "dave", Reason: "off", BanMS: 60000}).into(t, "the kick on node 1", &kicked)
	if !kicked.Complete || len(kicked.Kicks) != 2 || kicked.Kicks[0].Pod != "cl-a" || kicked.Kicks[1].Pod != "cl-b" ||
		kicked.Kicks[0].Connections != 1 || kicked.Kicks[1].Connections != 1 {
		t.Fatalf("the kick on node 1: %+v", kicked)
	}
	for _, c := range []*harness.Client{dave, daveB} {
		if code := c.WaitClosed(10 * time.Second); code != wire.CloseKicked || closeReason(c) != "kicked by system:admin: off" {
			t.Fatalf("dave's connection on node 3: %d %q", code, closeReason(c))
		}
	}
	if leave := awaitLeave(t, alice, "dave"); leave.Payload()["reason"] != "kicked by system:admin: off" {
		t.Fatalf("alice, on node 1, saw dave leave with %v", leave.Payload())
	}
	banned := []*harness.Gateway{n3}
	if !harness.HistoryOff() {
		// Without history, a node that opens the pod later knows no ban
		// (docs/protocol.md section 7).
		banned = append(banned, n2)
	}
	for _, n := range banned {
		harness.Eventually(t, 10*time.Second, "dave's ban on every node", func() bool {
			status, _ := harness.Refusal(t, n.WS, map[string][]string{"pod": {"cl-b"}}, harness.Bearer("dave-t"))
			return status == http.StatusForbidden
		})
	}

	// Node 2 stops answering (its process is frozen): node 1's listing
	// names it as a node that did not answer, and says it is incomplete.
	nodes[1].Pause()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			nodes[1].Resume()
		}
	}
	t.Cleanup(resume)
	ans, pods = listPods(t, n1.URL, "ops-t", "?cluster=1")
	resume()
	silent := 0
	for _, n := range ans.Nodes {
		if n.Node == ids[1] {
			if n.Answered || n.Error == "" {
				t.Fatalf("the frozen node in the listing: %+v", n)
			}
			silent++
		} else if !n.Answered {
			t.Fatalf("a live node did not answer: %+v", n)
		}
	}
	if silent != 1 || ans.Complete {
		t.Fatalf("the listing while node 2 is frozen: %+v", ans)
	}
	if _, ok := pods["cl-c"]; ok {
		t.Fatalf("cl-c, on the frozen node alone, is listed: %+v", pods["cl-c"])
	}
	if _, ok := pods["cl-a"]; !ok {
		t.Fatalf("cl-a is missing while node 2 is frozen: %+v", ans)
	}
	_ = carol
}
