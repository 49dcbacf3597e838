package chart

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestChartClusterSurvivesNodeLoss runs the container arguments the
// StatefulSet renders for three replicas as three gateways on this
// machine, each pod's DNS name under the headless service standing for
// 127.0.0.1 and a port of its own, and each node's volume a directory:
//
//   - a node alone is alive (/livez) but not ready (/healthz 503) until
//     the cluster it routes to has formed, so the liveness probe never
//     restarts it and the readiness probe keeps it out of the service;
//   - the three form one cluster: a participant on one node hears one on
//     another;
//   - envelopes sent to the node that leads the history stream are still
//     the pod's history once that node is killed (SIGKILL): a participant
//     who joins later on another node replays all of them, and the pod
//     goes on.
//
// The one argument the chart does not render is --nats-port, the test's
// window onto each node's NATS, to find the history stream's leader.
func TestChartClusterSurvivesNodeLoss(t *testing.T) {
	t.Parallel()
	m := render(t, "replicas=3")
	sts, c := m.StatefulSet, m.gateway(t)
	var nodes []*harness.GatewayProc
	var natsPorts []int
	for try := 1; ; try++ {
		var err error
		if nodes, natsPorts, err = tryStartChart(t, sts, c.Args); err == nil {
			break
		} else if !harness.PortTaken(err) || try == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("node %d's log:\n%s", i, n.Stderr)
			}
		}
	})
	for _, n := range nodes {
		n.WaitHealthy(60 * time.Second)
	}

	// One cluster: node 2 hears node 0.
	rx := nodes[2].GW.Dial(t, "probe", "probe-rx", "")
	tx := nodes[0].GW.Dial(t, "probe", "probe-tx", "")
	harness.Eventually(t, 20*time.Second, "an envelope from node 0 on node 2", func() bool {
		tx.Send(map[string]any{"kind": "probe"})
		for m := rx.Next(200 * time.Millisecond); m != nil; m = rx.Next(10 * time.Millisecond) {
			if m.Kind() == "probe" {
				return true
			}
		}
		return false
	})

	// The pod's participants on the stream's leader, which then dies.
	names := make([]string, len(nodes))
	for i := range nodes {
		names[i] = serverName(t, natsPorts[i])
	}
	leader := slices.Index(names, streamLeader(t, natsPorts[0], ""))
	if leader < 0 {
		t.Fatalf("the history stream's leader is none of the nodes %v", names)
	}
	s1, s2 := (leader+1)%3, (leader+2)%3
	const pod, total = "lab", 50
	bob := nodes[s1].GW.Dial(t, pod, "bob", "")
	alice := nodes[leader].GW.Dial(t, pod, "alice", "")
	bob.AwaitPresence("join", "alice", 10*time.Second)
	var sent []string
	for i := 0; i < total; i++ {
		id := fmt.Sprintf("before-%02d", i)
		alice.Send(map[string]any{"id": id, "kind": "chat", "payload": map[string]any{"n": i}})
		sent = append(sent, id)
	}
	for _, id := range sent {
		bob.ExpectEnvelope("chat", id) // relayed, so in the stream
	}
	if err := nodes[leader].Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-nodes[leader].Exited
	killed := time.Now()
	newLeader := streamLeader(t, natsPorts[s2], names[leader])
	t.Logf("nodes %v; killed the history stream's leader, node %d; node %s leads after %v",
		names, leader, newLeader, time.Since(killed).Round(time.Millisecond))

	// carol joins on the node that never had the pod open: its history is
	// read from the surviving copies.
	carol := nodes[s2].GW.Dial(t, pod, "carol", "history=all")
	info, _ := carol.Welcome.Payload()["history"].(map[string]any)
	var replayed []string
	if n, _ := info["replayed"].(float64); n > 0 {
		for i := 0; i < int(n); i++ {
			replayed = append(replayed, carol.NextOf().Str("id"))
		}
	}
	if !slices.Equal(replayed, sent) {
		t.Fatalf("carol's replay on node %d after node %d died:\n got  %v\n want %v", s2, leader, replayed, sent)
	}
	bob.Send(map[string]any{"id": "after", "kind": "chat"})
	carol.ExpectEnvelope("chat", "after")
	if status, body, err := harness.HTTPGet(nodes[s2].GW.URL + "/healthz"); err != nil || status != http.StatusOK {
		t.Fatalf("a surviving node's /healthz: %d %q %v", status, body, err)
	}
}

// tryStartChart starts the three nodes on ports that were free a moment
// ago, node 0 alone first: it must then be alive and not ready. It stops
// them when one cannot start (a port was taken meanwhile: the caller
// tries others).
func tryStartChart(t *testing.T, sts *appsv1.StatefulSet, args []string) ([]*harness.GatewayProc, []int, error) {
	t.Helper()
	cports := []int{harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)}
	natsPorts := []int{harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)}
	var nodes []*harness.GatewayProc
	for i := range cports {
		local := append(localArgs(t, sts, args, i, cports, t.TempDir()), fmt.Sprintf("--nats-port=%d", natsPorts[i]))
		// The environment the image and the container give it (the
		// flags win, as in the pod).
		n, err := harness.TryStartGatewayProc(t, containerEnv(sts.Spec.Template.Spec.Containers[0]), local...)
		if err != nil {
			for _, started := range append(nodes, n) {
				started.Stop()
			}
			return nil, nil, err
		}
		nodes = append(nodes, n)
		if i == 0 {
			checkForming(t, n)
		}
	}
	return nodes, natsPorts, nil
}

// checkForming checks a node whose cluster has not formed: alive (the
// liveness probe's /livez), not ready (the readiness probe's /healthz).
func checkForming(t *testing.T, n *harness.GatewayProc) {
	t.Helper()
	status, body, err := harness.HTTPGet(n.GW.URL + "/healthz")
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the history stream") {
		t.Fatalf("a node alone, its cluster not formed: /healthz %d %q %v, want 503 waiting for the history stream", status, body, err)
	}
	if status, body, err := harness.HTTPGet(n.GW.URL + "/livez"); err != nil || status != http.StatusOK {
		t.Fatalf("a node alone, its cluster not formed: /livez %d %q %v, want 200", status, body, err)
	}
}

// localArgs are the StatefulSet's container arguments for pod i on this
// machine: each pod's DNS name and the cluster port stand for 127.0.0.1
// and that node's port, the HTTP listener takes any loopback port, and
// the history's volume is dir. Everything else is as rendered.
func localArgs(t *testing.T, sts *appsv1.StatefulSet, args []string, i int, cports []int, dir string) []string {
	t.Helper()
	c := sts.Spec.Template.Spec.Containers[0]
	var clusterPort int32
	for _, p := range c.Ports {
		if p.Name == "cluster" {
			clusterPort = p.ContainerPort
		}
	}
	var pairs []string
	for j := range cports {
		pairs = append(pairs, fmt.Sprintf("%s:%d", podDNSName(sts, j), clusterPort), fmt.Sprintf("127.0.0.1:%d", cports[j]))
	}
	routes := strings.NewReplacer(pairs...)
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, v, _ := strings.Cut(a, "=")
		switch name {
		case "--listen":
			a = "--listen=127.0.0.1:0"
		case "--cluster-listen":
			a = fmt.Sprintf("--cluster-listen=127.0.0.1:%d", cports[i])
		case "--routes":
			a = "--routes=" + routes.Replace(v)
			if strings.Contains(a, ".svc.") {
				t.Fatalf("a route names no pod of the StatefulSet: %s", a)
			}
		case "--history-dir":
			a = "--history-dir=" + dir
		}
		out = append(out, a)
	}
	return out
}

// serverName is the name of the NATS server on port.
func serverName(t *testing.T, port int) string {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS on %d: %v", port, err)
	}
	defer nc.Close()
	return nc.ConnectedServerName()
}

// streamLeader is the history stream's leader, asked of the server on
// port, once it is not old (the one that died) and every replica that is
// not old is current.
func streamLeader(t *testing.T, port int, old string) string {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("NATS on %d: %v", port, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	harness.Eventually(t, 60*time.Second, "the history stream's leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "MCPP_HISTORY")
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == old {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if r.Name != old && (!r.Current || r.Offline) {
				return false
			}
		}
		leader = info.Cluster.Leader
		return true
	})
	return leader
}
