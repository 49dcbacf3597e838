package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/mcpp/gateway/wire"
)

// The operator's listing made of several nodes' pages (mergePods): no pod
// skipped or listed twice across pages, every node's members, the first
// node's pod-wide counts, and an answer bounded however many pods and
// members there are.

// nodePage is a node's page of pods named names, each with members of
// that node.
func nodePage(node string, more bool, members int, names ...string) adminReply {
	r := adminReply{Node: wire.AdminNode{Node: node, Answered: true}, More: more}
	for _, n := range names {
		p := wire.AdminPod{Name: n, Nodes: []string{node}, MemberCount: members, Contexts: wire.AdminContexts{Active: len(node)}}
		for i := range members {
			p.Members = append(p.Members, wire.AdminMember{ID: fmt.Sprintf("%s-m%04d", node, i), Node: node})
		}
		r.Pods = append(r.Pods, p)
	}
	return r
}

func names(pods []wire.AdminPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestMergePodsAcrossNodes(t *testing.T) {
	// Node a has more after "c"; node bb has more after "e": a page may
	// not go past "c", whatever bb sent after it.
	pods, next := mergePods([]adminReply{
		nodePage("a", true, 1, "a1", "b", "c"),
		nodePage("bb", true, 2, "b", "d", "e"),
	}, 10, adminAnswerBytes)
	if got := names(pods); !slices.Equal(got, []string{"a1", "b", "c"}) || next == nil || *next != "c" {
		t.Fatalf("the page: %v, next %v", got, next)
	}
	b := pods[1]
	if !slices.Equal(b.Nodes, []string{"a", "bb"}) || b.MemberCount != 3 || len(b.Members) != 3 || b.Members[0].ID != "a-m0000" || b.Contexts.Active != 1 {
		t.Fatalf("pod b of two nodes: %+v", b)
	}
	// The last page: nobody has more.
	pods, next = mergePods([]adminReply{nodePage("a", false, 0, "x"), nodePage("bb", false, 0, "w", "x")}, 10, adminAnswerBytes)
	if got := names(pods); !slices.Equal(got, []string{"w", "x"}) || next != nil {
		t.Fatalf("the last page: %v, next %v", got, next)
	}
	// limit cuts, and says where to go on.
	pods, next = mergePods([]adminReply{nodePage("a", false, 0, "p", "q", "r")}, 2, adminAnswerBytes)
	if got := names(pods); !slices.Equal(got, []string{"p", "q"}) || next == nil || *next != "q" {
		t.Fatalf("a page of 2 of 3: %v, next %v", got, next)
	}
}

func TestMergePodsBounded(t *testing.T) {
	// 200 pods of 120 members each on each of three nodes: a page is at
	// most 100 members a pod and maxBytes in all (about 23 pods of 100
	// members in 256 KiB; adminAnswerBytes is the same rule, 16 times).
	var replies []adminReply
	var all []string
	for i := range 200 {
		all = append(all, fmt.Sprintf("pod-%04d", i))
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		replies = append(replies, nodePage(n, false, 120, all...))
	}
	const maxBytes = 256 << 10
	pods, next := mergePods(replies, adminMaxLimit, maxBytes)
	b, _ := json.Marshal(wire.AdminPods{Pods: pods, Next: next})
	if len(b) > maxBytes+4<<10 || next == nil || len(pods) == 0 || len(pods) == len(all) {
		t.Fatalf("%d pods in %d bytes, next %v", len(pods), len(b), next)
	}
	for _, p := range pods {
		if len(p.Members) != adminListMembers || p.MemberCount != 360 || len(p.Nodes) != 3 {
			t.Fatalf("pod %s: %d members listed of %d, nodes %v", p.Name, len(p.Members), p.MemberCount, p.Nodes)
		}
	}
	// The next page begins right after.
	rest, _ := mergePods([]adminReply{nodePage("n1", false, 0, all[len(pods):]...)}, adminMaxLimit, maxBytes)
	if rest[0].Name != fmt.Sprintf("pod-%04d", len(pods)) || *next != pods[len(pods)-1].Name {
		t.Fatalf("the next page begins at %s, after %s", rest[0].Name, *next)
	}
}
