package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidwall/gjson"

	mcpp "github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The world of the cluster's fault suite: three gateway processes, each
// with its history on disk (--history-dir, so that a node killed and
// started again is the same JetStream peer) and a route proxy of the
// test's in front of its cluster port (harness.RouteNet), the members and
// publishers of the pods, and the faults the test injects: SIGSTOP and
// SIGCONT, routes cut and restored, SIGKILL and a start on the same
// directory. Everything random comes from one seed, printed, which
// MCPP_FAULT_SEED replays.

// faultSize is how big a run is.
type faultSize struct {
	pods      int           // pods of three members, one on each node, and a filtered watcher
	sendEvery time.Duration // each member sends one envelope this often
	pubEvery  time.Duration // each pod's publisher publishes one this often (over HTTP)
	heartbeat time.Duration // --cluster-heartbeat
	duration  time.Duration // 0: each fault once; else faults for this long
	gapMin    time.Duration // between two faults, at least
	gapMax    time.Duration // and at most
	storm     int           // members that join each pod in a join storm
	history   int           // --history
}

// ciSize is what the README's test command runs: each fault once.
var ciSize = faultSize{pods: 6, sendEvery: 100 * time.Millisecond, pubEvery: 250 * time.Millisecond,
	heartbeat: 500 * time.Millisecond, gapMin: time.Second, gapMax: 2 * time.Second, storm: 2, history: 5000}

// fullSize is BENCHMARKS.md's: 3 nodes, 1,000 pods of 3, a fault every
// 10-30 s for 5 minutes (MCPP_FAULTS=full).
var fullSize = faultSize{pods: 1000, sendEvery: 2 * time.Second, pubEvery: 5 * time.Second,
	heartbeat: time.Second, duration: 5 * time.Minute, gapMin: 10 * time.Second, gapMax: 30 * time.Second, storm: 1, history: 5000}

// sizeFromEnv reads MCPP_FAULTS: empty is ciSize, "full" fullSize, or
// "PODS,DURATION,SENDEVERY" (e.g. "300,2m,1s") a size of one's own with
// fullSize's faults.
func sizeFromEnv(t *testing.T) faultSize {
	s := os.Getenv("MCPP_FAULTS")
	switch s {
	case "":
		return ciSize
	case "full":
		return fullSize
	}
	size := fullSize
	var d, e string
	if _, err := fmt.Sscanf(strings.ReplaceAll(s, ",", " "), "%d %s %s", &size.pods, &d, &e); err != nil {
		t.Fatalf("MCPP_FAULTS=%q: want full or PODS,DURATION,SENDEVERY: %v", s, err)
	}
	var err error
	if size.duration, err = time.ParseDuration(d); err != nil {
		t.Fatalf("MCPP_FAULTS=%q: %v", s, err)
	}
	if size.sendEvery, err = time.ParseDuration(e); err != nil {
		t.Fatalf("MCPP_FAULTS=%q: %v", s, err)
	}
	size.pubEvery = 2 * size.sendEvery
	return size
}

// seedFromEnv is MCPP_FAULT_SEED, or a new seed.
func seedFromEnv(t *testing.T) int64 {
	if s := os.Getenv("MCPP_FAULT_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("MCPP_FAULT_SEED=%q: %v", s, err)
		}
		return seed
	}
	return time.Now().UnixNano()
}

type faultWorld struct {
	t      *testing.T
	size   faultSize
	seed   int64
	rngMu  sync.Mutex
	rng    *rand.Rand
	ledger *ledger

	nodes     []*harness.GatewayProc
	net       *harness.RouteNet
	natsPorts []int
	names     []string // the nodes' NATS server names (kept in --history-dir)
	listen    []string

	mu      sync.Mutex
	down    []bool
	members map[string][]*fmember // by pod
	pods    []string
	pubs    []*publisher
}

func (w *faultWorld) nodeCount() int { return len(w.nodes) }

// between is a random duration in [lo, hi].
func (w *faultWorld) between(lo, hi time.Duration) time.Duration {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int63n(int64(hi-lo)))
}

func (w *faultWorld) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.Intn(n)
}

func (w *faultWorld) up(i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.down[i]
}

func (w *faultWorld) setDown(i int, down bool) {
	w.mu.Lock()
	w.down[i] = down
	w.mu.Unlock()
}

func (w *faultWorld) ws(i int) string   { return "ws://" + w.listen[i] + "/ws" }
func (w *faultWorld) http(i int) string { return "http://" + w.listen[i] }

// startFaultWorld starts the three nodes behind their route proxies.
func startFaultWorld(t *testing.T, size faultSize) *faultWorld {
	t.Helper()
	w := &faultWorld{t: t, size: size, seed: seedFromEnv(t), ledger: newLedger(), members: map[string][]*fmember{}}
	w.rng = rand.New(rand.NewSource(w.seed))
	t.Logf("fault suite: seed %d (MCPP_FAULT_SEED=%d replays it), %d pods, heartbeat %v", w.seed, w.seed, size.pods, size.heartbeat)
	var err error
	for try := 1; ; try++ {
		if err = w.tryStart(t); err == nil {
			break
		}
		if !harness.PortTaken(err) || try == 3 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// MCPP_FAULT_LOGS=1 shows the nodes' logs of a run that passed too.
		if t.Failed() || os.Getenv("MCPP_FAULT_LOGS") != "" {
			t.Logf("seed %d (MCPP_FAULT_SEED=%d replays it)", w.seed, w.seed)
			for i := range w.nodes {
				if w.up(i) {
					t.Logf("node %d, publishing to the history stream through its NATS: %s", i+1, w.probe(i))
				}
			}
			if os.Getenv("MCPP_FAULT_STACKS") != "" {
				// Every goroutine of every node, into its log: what a
				// node that stopped answering waits on.
				for i, n := range w.nodes {
					if w.up(i) && n.Cmd != nil && n.Cmd.Process != nil {
						_ = n.Cmd.Process.Signal(syscall.SIGQUIT)
					}
				}
				time.Sleep(3 * time.Second)
			}
			// The whole logs go to files (a full-size run's are hundreds
			// of megabytes), their ends to the test's output.
			dir, err := os.MkdirTemp("", "mcpp-faults-")
			if err != nil {
				dir = ""
			}
			for i, n := range w.nodes {
				log := n.Stderr.String()
				if dir != "" {
					name := filepath.Join(dir, fmt.Sprintf("node%d.log", i+1))
					if err := os.WriteFile(name, []byte(log), 0o644); err == nil {
						t.Logf("node %d's whole log: %s", i+1, name)
					}
				}
				if len(log) > 200_000 {
					log = "…" + log[len(log)-200_000:]
				}
				t.Logf("node %d's log:\n%s", i+1, log)
			}
		}
	})
	for _, n := range w.nodes {
		n.WaitHealthy(90 * time.Second)
	}
	waitConnected(t, w.nodes)
	for i := range w.nodes {
		w.learnNode(i)
	}
	return w
}

// tryStart starts the nodes on ports that were free a moment ago; it
// stops them when one of those was taken meanwhile.
func (w *faultWorld) tryStart(t *testing.T) error {
	const n = 3
	cluster := make([]string, n)
	w.listen, w.natsPorts, w.names, w.down = make([]string, n), make([]int, n), make([]string, n), make([]bool, n)
	for i := range n {
		cluster[i] = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		w.listen[i] = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		w.natsPorts[i] = harness.FreePort(t)
	}
	w.net = harness.NewRouteNet(t, cluster)
	w.nodes = make([]*harness.GatewayProc, n)
	for i := range n {
		var routes []string
		for j, p := range w.net.Proxies {
			if j != i {
				routes = append(routes, "nats-route://"+p.Addr)
			}
		}
		dir := filepath.Join(t.TempDir(), "history")
		args := []string{"--listen", w.listen[i], "--cluster-name", "mcpp-faults",
			"--cluster-listen", cluster[i], "--cluster-advertise", w.net.Proxies[i].Addr, "--routes", strings.Join(routes, ","),
			"--cluster-heartbeat", w.size.heartbeat.String(), "--history", fmt.Sprint(w.size.history), "--history-bytes", "1GiB",
			"--history-dir", dir, "--nats-port", fmt.Sprint(w.natsPorts[i]),
			"--rate", "100000", "--burst", "100000", "--max-connections", "20000"}
		if os.Getenv("MCPP_FAULT_DEBUG") != "" {
			// What each pod did with every presence change, for a run
			// whose views went wrong.
			args = append(args, "--log-level", "debug")
		}
		var err error
		if w.nodes[i], err = harness.TryStartGatewayProc(t, nil, args...); err != nil {
			for _, started := range w.nodes[:i+1] {
				if started != nil {
					started.Stop()
				}
			}
			return err
		}
	}
	return nil
}

// natsConn connects to node i's NATS server, as a client of its own (not
// the gateway's connection).
func (w *faultWorld) natsConn(i int) (*nats.Conn, error) {
	return nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", w.natsPorts[i]), nats.NoReconnect(), nats.Timeout(5*time.Second))
}

// learnNode reads node i's NATS server id (for its route proxy) and name
// (for the stream's leader), which a start makes anew.
func (w *faultWorld) learnNode(i int) {
	nc, err := w.natsConn(i)
	if err != nil {
		w.t.Fatalf("node %d's NATS port: %v", i+1, err)
	}
	defer nc.Close()
	w.net.SetID(i, nc.ConnectedServerId())
	w.names[i] = nc.ConnectedServerName()
}

// leader is the node that leads the history stream now, asked of the
// nodes that are up (for up to 10 s: a stream between two leaders has
// none), or -1.
func (w *faultWorld) leader() int {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if l := w.leaderNow(); l >= 0 {
			return l
		}
	}
	return -1
}

func (w *faultWorld) leaderNow() int {
	for i := range w.nodes {
		if !w.up(i) {
			continue
		}
		var name string
		if info, err := w.streamInfo(i); err == nil && info.Cluster != nil {
			name = info.Cluster.Leader
		}
		for j, n := range w.names {
			if n == name && name != "" {
				return j
			}
		}
	}
	return -1
}

// jetStream is JetStream through node i's NATS server, on a connection of
// its own that done closes.
func (w *faultWorld) jetStream(i int) (js jetstream.JetStream, done func(), err error) {
	nc, err := w.natsConn(i)
	if err != nil {
		return nil, nil, err
	}
	if js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

// streamInfo is the history stream's info as node i's NATS server gives
// it.
func (w *faultWorld) streamInfo(i int) (*jetstream.StreamInfo, error) {
	js, done, err := w.jetStream(i)
	if err != nil {
		return nil, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "MCPP_HISTORY")
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// inStream says whether the history stream holds e, read through node
// i's NATS with an ordered consumer of the pod's subject (from the
// stream's leader), and where.
func (w *faultWorld) inStream(i int, e lackedEnvelope) string {
	js, done, err := w.jetStream(i)
	if err != nil {
		return "the stream not asked: " + err.Error()
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "MCPP_HISTORY")
	if err != nil {
		return "the stream not asked: " + err.Error()
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"mcpp.pod." + e.pod}})
	if err != nil {
		return "the stream not asked: " + err.Error()
	}
	want := []byte(`"` + e.id() + `"`)
	read := 0
	for {
		batch, err := c.FetchNoWait(256)
		if err != nil {
			return "the stream not read: " + err.Error()
		}
		n := 0
		for m := range batch.Messages() {
			n++
			read++
			if bytes.Contains(m.Data(), want) {
				md, _ := m.Metadata()
				return fmt.Sprintf("the stream holds it at %d, stored at %s", md.Sequence.Stream, md.Timestamp.UTC().Format("15:04:05.000"))
			}
		}
		if err := batch.Error(); err != nil {
			return "the stream not read: " + err.Error()
		}
		if n == 0 {
			return fmt.Sprintf("the stream lacks it (%d messages of the pod read)", read)
		}
	}
}

// probe publishes a message to the history stream through node i's
// NATS (its own connection, not the gateway's) and says whether and when
// the stream acknowledged it: a node whose writer holds while this
// answers has lost its acknowledgements, one where this does not answer
// cannot reach the stream's leader.
func (w *faultWorld) probe(i int) string {
	js, done, err := w.jetStream(i)
	if err != nil {
		return "not connected: " + err.Error()
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	ack, err := js.Publish(ctx, "mcpp.pod.faults-probe", []byte("probe"))
	if err != nil {
		return fmt.Sprintf("no acknowledgement after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	return fmt.Sprintf("stored at %d, acknowledged after %v", ack.Sequence, time.Since(start).Round(time.Millisecond))
}

// replicated waits until the history stream has a leader and every other
// replica is current, at most d, and says how long that took. A stream of
// three replicas tolerates one fault at a time, as JetStream states: the
// suite injects the next fault once the stream is whole again (a node
// started again on its directory catches up first; at full size, tens of
// seconds), not while a second replica is still behind.
func (w *faultWorld) replicated(d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		if w.streamWhole() {
			return time.Since(start), true
		}
		if time.Since(start) > d {
			return time.Since(start), false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *faultWorld) streamWhole() bool {
	for i := range w.nodes {
		if !w.up(i) {
			continue
		}
		info, err := w.streamInfo(i)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != w.nodeCount()-1 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
		return true
	}
	return false
}

// addMember starts a member of pod whose home is node home.
func (w *faultWorld) addMember(pod, id string, home int, sends, filtered bool) *fmember {
	m := &fmember{w: w, pod: pod, id: id, home: home, sends: sends, filtered: filtered, node: -1,
		inFlight: map[int]int{}, closes: map[string]int{}, done: make(chan struct{})}
	w.ledger.member(pod, id, filtered)
	w.mu.Lock()
	w.members[pod] = append(w.members[pod], m)
	w.mu.Unlock()
	go m.run(w.size.sendEvery)
	return m
}

// startTraffic joins every pod's members (three that send, one on each
// node, and a watcher that takes the main context only) and starts its
// publisher, and waits until every member is in.
func (w *faultWorld) startTraffic() {
	for p := range w.size.pods {
		pod := fmt.Sprintf("fault-%d", p)
		w.pods = append(w.pods, pod)
		for i := range w.nodes {
			w.addMember(pod, fmt.Sprintf("m%d", i+1), i, true, false)
		}
		w.addMember(pod, "watch", p%len(w.nodes), false, true)
		pub := &publisher{w: w, pod: pod, id: "pub", node: p, done: make(chan struct{}), answers: map[string]int{}}
		w.pubs = append(w.pubs, pub)
	}
	for _, pub := range w.pubs {
		go pub.run(w.size.pubEvery)
	}
	took, ok := w.exact(2 * time.Minute)
	if !ok {
		w.dumpTraces()
		w.t.Fatalf("the members' views were not exact %v after they joined: %s", took, w.inexact())
	}
	w.t.Logf("%d members joined %d pods; every view exact after %v", w.count(), len(w.pods), took.Round(time.Millisecond))
}

func (w *faultWorld) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ms := range w.members {
		n += len(ms)
	}
	return n
}

func (w *faultWorld) allMembers() []*fmember {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*fmember
	for _, pod := range w.pods {
		out = append(out, w.members[pod]...)
	}
	return out
}

// exact waits until every member is connected and welcomed, and every
// one's view of who is present is exactly the others, and reports how
// long that took (false: not within d).
func (w *faultWorld) exact(d time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		if w.inexact() == "" {
			return time.Since(start), true
		}
		if time.Since(start) > d {
			return time.Since(start), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// watchStream samples the history stream's state once a second, as a
// node that is up sees it, until stop is closed, and returns what
// changed: its leader, and each replica's currency and lag, from
// start. A fault whose views stay inexact prints it, so that a run says
// whether the stream had a leader and a current quorum meanwhile.
func (w *faultWorld) watchStream(start time.Time, stop <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		var b strings.Builder
		last := ""
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			state := w.streamState()
			if state != last {
				fmt.Fprintf(&b, "\n          +%v %s", time.Since(start).Round(100*time.Millisecond), state)
				last = state
			}
			select {
			case <-stop:
				out <- b.String()
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// streamState is the history stream's leader and replicas as each node
// up sees them (a node cut off sees no leader where the others do).
func (w *faultWorld) streamState() string {
	var views []string
	for i := range w.nodes {
		if !w.up(i) {
			continue
		}
		info, err := w.streamInfo(i)
		if err != nil {
			views = append(views, fmt.Sprintf("node %d: no answer", i+1))
			continue
		}
		if info.Cluster == nil {
			views = append(views, fmt.Sprintf("node %d: no cluster info", i+1))
			continue
		}
		v := fmt.Sprintf("node %d: leader %q", i+1, info.Cluster.Leader)
		for _, r := range info.Cluster.Replicas {
			v += fmt.Sprintf(", %s current=%v offline=%v lag=%d", r.Name, r.Current, r.Offline, r.Lag)
		}
		views = append(views, v)
	}
	if len(views) == 0 {
		return "no node up"
	}
	return strings.Join(views, "; ")
}

// inexact says what keeps the views from being exact ("" when they are).
func (w *faultWorld) inexact() string {
	w.mu.Lock()
	pods := append([]string(nil), w.pods...)
	members := make(map[string][]*fmember, len(w.members))
	for k, v := range w.members {
		members[k] = append([]*fmember(nil), v...)
	}
	w.mu.Unlock()
	var bad, badPods []string
	for _, pod := range pods {
		views := map[*fmember]map[string]bool{}
		for _, m := range members[pod] {
			ok, v := m.present()
			if !ok {
				bad = append(bad, m.name()+" is not connected")
				continue
			}
			views[m] = v
		}
		if len(views) != len(members[pod]) {
			continue
		}
		for m, v := range views {
			var want []string
			for _, o := range members[pod] {
				if o != m {
					want = append(want, o.id)
				}
			}
			got := make([]string, 0, len(v))
			for id := range v {
				got = append(got, id)
			}
			if !sameSet(got, want) {
				sort.Strings(got)
				sort.Strings(want)
				bad = append(bad, fmt.Sprintf("%s sees %v, want %v", m.name(), got, want))
				if len(badPods) < 2 && !slices.Contains(badPods, pod) {
					badPods = append(badPods, pod)
				}
			}
		}
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
	}
	// What the members of the first pods seen wrong did, to read beside
	// the nodes' logs.
	for _, pod := range badPods {
		for _, m := range members[pod] {
			m.mu.Lock()
			bad = append(bad, fmt.Sprintf("\n%s's trace:\n  %s", m.name(), strings.Join(m.trace, "\n  ")))
			m.mu.Unlock()
		}
	}
	return strings.Join(bad, "; ")
}

// stopTraffic stops the senders, waits until what they sent is answered
// (at most 30 s), and stops the members.
func (w *faultWorld) stopTraffic() {
	for _, p := range w.pubs {
		p.stop.Store(true)
	}
	for _, p := range w.pubs {
		<-p.done
	}
	for _, m := range w.allMembers() {
		m.mu.Lock()
		m.sends = false
		m.mu.Unlock()
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		open := 0
		for _, m := range w.allMembers() {
			m.mu.Lock()
			open += len(m.inFlight)
			m.mu.Unlock()
		}
		if open == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// settleDeliveries waits until the checker finds nothing missing (what
// was acknowledged on one node reaches the others a moment later), at
// most d, and returns its report.
func (w *faultWorld) settleDeliveries(d time.Duration) *report {
	deadline := time.Now().Add(d)
	for {
		r := w.ledger.check(w.seed, nil, time.Time{})
		if r.ok() || time.Now().After(deadline) {
			return r
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// healthy waits until every node that is up answers /healthz with 200,
// at most d, and reports whether they did.
func (w *faultWorld) healthy(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		well := true
		for i := range w.nodeCount() {
			if !w.up(i) {
				continue
			}
			if status, _, err := harness.HTTPGet(w.http(i) + "/healthz"); err != nil || status != http.StatusOK {
				well = false
			}
		}
		if well {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// histories reads each pod's history on node i: a reader watches it with
// history=all, and reads its replay and then what comes live, up to an
// envelope published (and stored) after the run: a node still catching up
// replays what it has, and delivers the rest live, after.
func (w *faultWorld) histories(i int) map[string][]received {
	// Read 16 at a time: one after the other, 1,000 pods' histories took
	// longer than the faults.
	const readers = 16
	var (
		mu   sync.Mutex
		out  = map[string][]received{}
		errs []error
		wg   sync.WaitGroup
		next = make(chan string)
	)
	// The first pod that cannot be read ends the reading: the node is
	// not well, and the test says so now rather than in an hour.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pod := range next {
				got, err := w.history(ctx, i, pod)
				mu.Lock()
				out[pod] = got
				if err != nil && ctx.Err() == nil {
					errs = append(errs, err)
					stop()
				}
				mu.Unlock()
			}
		}()
	}
	for _, pod := range w.pods {
		if ctx.Err() != nil {
			break
		}
		next <- pod
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		w.t.Fatalf("reading the histories on node %d: %d pods failed, the first: %v", i+1, len(errs), errs[0])
	}
	return out
}

// history reads one pod's history on node i (histories).
func (w *faultWorld) history(ctx context.Context, i int, pod string) ([]received, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		got, err := w.historyOnce(ctx, i, pod, attempt)
		// A replay interrupted (1011: the stream did not answer a read in
		// time, a node still catching up) is read again from the start,
		// as a client does.
		if err == nil || !strings.Contains(err.Error(), "1011") || ctx.Err() != nil {
			return got, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// historyOnce is one reading of history: a watcher's whole replay, up to
// an envelope published after it (end-ATTEMPT).
func (w *faultWorld) historyOnce(ctx context.Context, i int, pod string, attempt int) ([]received, error) {
	q := "pod=" + pod + "&participant=reader&history=all&observe=1"
	conn, err := mcpp.DialConn(ctx, w.ws(i)+"?"+q, mcpp.Options{Pod: pod, ReadLimit: 64 << 20})
	// A node whose routes just came back may still refuse (no_quorum,
	// a pod reading its past), and one started again may not answer
	// within a dial's 10 s while it reads the stream's past (runs 67
	// and 69: RELIABILITY.md, "Seen, and left"): tried again, as a
	// client does, within the pod's 60 s.
	for err != nil && (strings.Contains(err.Error(), "503") || errors.Is(err, context.DeadlineExceeded)) && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		conn, err = mcpp.DialConn(ctx, w.ws(i)+"?"+q, mcpp.Options{Pod: pod, ReadLimit: 64 << 20})
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s's history on node %d: %w", pod, i+1, err)
	}
	defer func() { _ = conn.CloseNow() }()
	end := fmt.Sprintf("end-%d", attempt)
	status, body, err := postJSON(w.http(i)+"/pods/"+pod+"/envelopes?participant=end", `{"id": "`+end+`", "kind": "end"}`)
	if err != nil || status != 200 || !strings.Contains(body, `"id":"`+end+`"`) {
		return nil, fmt.Errorf("the end of %s on node %d: %d %s %v", pod, i+1, status, body, err)
	}
	var got []received
	for {
		b, err := conn.Read(ctx, nil)
		if err != nil {
			return got, fmt.Errorf("reading %s's history on node %d: %w after %d envelopes", pod, i+1, err, len(got))
		}
		for _, line := range strings.Split(string(b), "\n") {
			r := gjson.Parse(line)
			switch {
			case r.Get("kind").String() == faultKind:
				got = append(got, received{r.Get("from").String(), int(r.Get("payload.n").Int())})
			case r.Get("id").String() == end:
				return got, nil
			}
		}
	}
}
