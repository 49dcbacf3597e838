package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// `mcpp bench --soak 30m` runs mixed traffic against one gateway process
// for that long, at a moderate rate, then leaves it alone for --settle,
// and samples the process's resources every --sample-every: RSS, heap in
// use, goroutines, open descriptors, and the gateway's own gauges. Before
// that, the same traffic runs for --soak-warmup, followed by a settle
// period, and the sample at its end is the start. At the end it prints
// the start against the end (and the fresh process's figures).
//
// The settle period (5 minutes by default) is long enough for what the
// gateway holds for the traffic to expire, and for two of the collections
// that the Go runtime forces every 2 minutes on an idle process: heap in
// use is not measured after a collection the bench could force, so a
// shorter one would count garbage.
//
// The gateway runs with its defaults (the rate limits included, which the
// floods run into) but for soakGatewayArgs: contexts time out after 20 s
// and are forgotten 30 s later, and history keeps 2 minutes, so that
// everything the gateway holds for the traffic has gone by the end of the
// settle period, and what is left is what it would keep for ever.
//
// The traffic, all of it at once (soakRun's actors):
//   - 4 pods of 3 chatters each (one with batch=1), a chat a second each,
//     some addressed to one other, ephemeral or transient (later consumed);
//     every 30 s one of them bursts 150 envelopes, and each asks for a page
//     of history and the pod's contexts every 20 s or so;
//   - a reasoner per pod opens a context every 3 s or so, sends 2 to 6
//     steps in it, sometimes a child context, and concludes it, or leaves
//     one in three to time out;
//   - a participant per pod changes its filter every 5 s (gateway/filter);
//   - churn: 3 to 4 joins a second, one in two into those pods and one in
//     two into a pod of its own that ends with it (or once the context it
//     opened is forgotten); three in four leave with a closing handshake,
//     one in four drops the TCP connection; some send first;
//   - a flood every minute: in a pod of its own, a sender sends 300
//     envelopes of 128 KiB as fast as it can (over the rate limit's burst
//     of 200 only when it sends faster than 100 a second) while a reader
//     there reads nothing: it must be cut as a slow consumer; another
//     reader there reads everything;
//   - replays: every 10 s a participant joins with history=N (10 to 300) or
//     with resume=ID (the last envelope a participant of the pod received)
//     and reads what is replayed; a gateway/history request over POST;
//   - POST publishes: one to three envelopes a second, one in ten to a
//     fresh pod, and a gateway/contexts request over POST now and then.

// soakPlan is one --soak run.
type soakPlan struct {
	// Warmup is traffic before the start, followed by a settle period:
	// the start is then what the gateway keeps once it has served every
	// kind of traffic (pools, maps and caches that grow once), so that
	// what is left at the end is what the soak itself added.
	Warmup   time.Duration
	Duration time.Duration // of traffic
	Settle   time.Duration // without traffic, at the end
	Every    time.Duration // between samples
}

// soakGatewayArgs are the flags the soak starts the gateway with, before
// --gateway-args.
var soakGatewayArgs = []string{"--context-timeout", "20s", "--context-retention", "30s", "--history-age", "2m"}

// checkSoak says what is wrong with a --soak command line, or "".
func checkSoak(p soakPlan, remoteGateway, otherMode bool) string {
	switch {
	case p.Duration < 10*time.Second:
		return "--soak must be at least 10s"
	case p.Settle < 0:
		return "--settle must not be negative"
	case p.Warmup < 0:
		return "--soak-warmup must not be negative"
	case p.Every < time.Second:
		return "--sample-every must be at least 1s"
	case remoteGateway:
		return "--soak needs bench to start the gateway itself (no --gateway): it reads the process's resources"
	case otherMode:
		return "--soak does not go with --baseline, --versus, --peer, --idle or --stalled"
	}
	return ""
}

// soakSample is the gateway's resources at one time.
type soakSample struct {
	At          time.Duration // since the traffic began
	Phase       string
	RSS         int64
	FDs         int
	Heap        float64 // go_memstats_heap_inuse_bytes
	Goroutines  float64
	Connections float64
	Pods        float64
	Contexts    float64
	HistEntries float64
	HistBytes   float64
	EnvelopesIn float64
	Cuts        float64
	CPU         time.Duration // the process's CPU time so far
	metrics     metricSet
}

// openFDs counts the process's open file descriptors.
func openFDs(pid int) (int, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es), err
}

func takeSample(ctx context.Context, s *server, at time.Duration, phase string) (soakSample, error) {
	r, err := rss(s.pid())
	if err != nil {
		return soakSample{}, fmt.Errorf("the gateway process is gone: %w", err)
	}
	fds, err := openFDs(s.pid())
	if err != nil {
		return soakSample{}, fmt.Errorf("the gateway process is gone: %w", err)
	}
	cpu, _ := cpuTime(s.pid())
	m, err := scrape(ctx, s.addr)
	if err != nil {
		return soakSample{}, err
	}
	cuts, _ := m.sum("mcpp_cuts_total")
	return soakSample{
		At: at, Phase: phase, RSS: r, FDs: fds, CPU: cpu, metrics: m,
		Heap: m.get("go_memstats_heap_inuse_bytes"), Goroutines: m.get("go_goroutines"),
		Connections: m.get("mcpp_connections"), Pods: m.get("mcpp_pods"), Contexts: m.get("mcpp_contexts_active"),
		HistEntries: m.get("mcpp_history_entries"), HistBytes: m.get("mcpp_history_bytes"),
		EnvelopesIn: m.get("mcpp_envelopes_in_total"), Cuts: cuts,
	}, nil
}

const soakHeader = "    time  phase     RSS        heap      gor  fds  conns  pods  ctxs  hist entries / bytes     envelopes in   cuts  CPU"

// row writes a sample as a line of the table; prev gives the CPU share
// since the sample before.
func (s soakSample) row(prev soakSample) string {
	cpu := "-"
	if d := s.At - prev.At; d > 0 && s.CPU >= prev.CPU {
		cpu = fmt.Sprintf("%.0f%%", 100*float64(s.CPU-prev.CPU)/float64(d))
	}
	return fmt.Sprintf("%8s  %-8s %9s  %9s  %5.0f  %3d  %5.0f  %4.0f  %4.0f  %7.0f / %-10s  %12.0f  %5.0f  %s",
		clock(s.At), s.Phase, bytesString(s.RSS), bytesString(int64(s.Heap)), s.Goroutines, s.FDs, s.Connections,
		s.Pods, s.Contexts, s.HistEntries, bytesString(int64(s.HistBytes)), s.EnvelopesIn, s.Cuts, cpu)
}

// clock writes d as [-]m:ss.
func clock(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%s%d:%02d", sign, int(d/time.Minute), int(d%time.Minute/time.Second))
}

// endCheck is one figure at the start and at the end, and whether it came
// back (within its slack).
type endCheck struct {
	Name       string
	Start, End string
	Change     string
	Back       bool
	Slack      string
}

// compareEnds says, for each figure, whether the end is back where the
// start was. The slack: a few goroutines and descriptors (the runtime's and
// the HTTP server's own come and go), live heap within 25% or 4 MiB of the
// start (maps and pools that grew keep some of their size), RSS within 50%
// or 16 MiB (the runtime returns freed pages to the system slowly);
// connections, pods, contexts and history exactly.
func compareEnds(start, end soakSample) []endCheck {
	count := func(name string, a, b float64, slack float64, note string) endCheck {
		return endCheck{Name: name, Start: fmt.Sprintf("%.0f", a), End: fmt.Sprintf("%.0f", b),
			Change: fmt.Sprintf("%+.0f", b-a), Back: b <= a+slack, Slack: note}
	}
	size := func(name string, a, b int64, frac float64, floor int64, note string) endCheck {
		change := "+0.0%"
		if a > 0 {
			change = fmt.Sprintf("%+.1f%%", 100*float64(b-a)/float64(a))
		}
		return endCheck{Name: name, Start: bytesString(a), End: bytesString(b), Change: change,
			Back: b <= a+max(int64(frac*float64(a)), floor), Slack: note}
	}
	return []endCheck{
		size("RSS", start.RSS, end.RSS, 0.5, 16<<20, "50% or 16 MiB"),
		size("heap in use", int64(start.Heap), int64(end.Heap), 0.25, 4<<20, "25% or 4 MiB"),
		count("goroutines", start.Goroutines, end.Goroutines, 5, "5"),
		count("open descriptors", float64(start.FDs), float64(end.FDs), 3, "3"),
		count("connections", start.Connections, end.Connections, 0, "0"),
		count("pods", start.Pods, end.Pods, 0, "0"),
		count("active contexts", start.Contexts, end.Contexts, 0, "0"),
		count("history entries", start.HistEntries, end.HistEntries, 0, "0"),
	}
}

// tally counts what the soak's actors did, and keeps the first problems.
type tally struct {
	mu        sync.Mutex
	counts    map[string]int64
	problems  []string
	nproblems int64
}

func newTally() *tally { return &tally{counts: map[string]int64{}} }

func (t *tally) add(name string, n int64) {
	t.mu.Lock()
	t.counts[name] += n
	t.mu.Unlock()
}

// problem records something that should not have happened.
func (t *tally) problem(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nproblems++
	if len(t.problems) < 30 {
		t.problems = append(t.problems, fmt.Sprintf(format, args...))
	}
}

func (t *tally) get(name string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[name]
}

// report writes the counts, sorted, then the problems.
func (t *tally) report(w io.Writer) {
	t.mu.Lock()
	keys := make([]string, 0, len(t.counts))
	for k := range t.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-44s %d\n", k, t.counts[k])
	}
	fmt.Fprintf(w, "problems: %d\n", t.nproblems)
	t.mu.Unlock()
	t.reportProblems(w)
}

// reportProblems writes the problems kept.
func (t *tally) reportProblems(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

const soakPods = 4

func soakPod(i int) string { return fmt.Sprintf("soak-%d", i) }

// soakRun is the traffic of one soak.
type soakRun struct {
	ws, base string // ws://HOST:PORT/ws, http://HOST:PORT
	t        *tally
	seq      atomic.Int64
	last     [soakPods]atomic.Value // string: the last envelope in history a participant of the pod received
	drains   sync.WaitGroup
}

func (b *bencher) soak(ctx context.Context, plan soakPlan) error {
	bin, err := gatewayBinary(b.gwBin)
	if err != nil {
		return err
	}
	args := append(append([]string{}, soakGatewayArgs...), b.gwArgs...)
	s, err := startGatewayWith(bin, args)
	if err != nil {
		return err
	}
	defer s.stop()
	fmt.Fprintf(b.out, "# soak: %s of warm-up traffic, %s without; then %s of mixed traffic, %s without; sampled every %s\n",
		plan.Warmup, plan.Settle, plan.Duration, plan.Settle, plan.Every)
	fmt.Fprintf(b.out, "# gateway %s with its defaults but %s\n", bin, strings.Join(args, " "))
	time.Sleep(2 * time.Second)
	p := &soakPhases{b: b, s: s, plan: plan, t0: time.Now()}
	fresh, err := p.sample(ctx, "fresh")
	if err != nil {
		return err
	}
	start, end := fresh, fresh
	var warm *tally
	if plan.Warmup > 0 {
		if start, warm, err = p.run(ctx, plan.Warmup, "warm-up", "start"); err != nil {
			return err
		}
	}
	end, t, err := p.run(ctx, plan.Duration, "traffic", "end")
	if err != nil {
		return err
	}
	b.soakReport(fresh, start, end, t, plan)
	problems := t.nproblems
	if warm != nil && warm.nproblems > 0 {
		fmt.Fprintf(b.out, "problems in the warm-up: %d\n", warm.nproblems)
		warm.reportProblems(b.out)
		problems += warm.nproblems
	}
	if problems > 0 {
		return fmt.Errorf("%d problems in the traffic (above)", problems)
	}
	return nil
}

// soakPhases samples one gateway through the soak's phases and prints a
// row for every sample.
type soakPhases struct {
	b    *bencher
	s    *server
	plan soakPlan
	t0   time.Time
	last *soakSample
}

func (p *soakPhases) sample(ctx context.Context, phase string) (soakSample, error) {
	smp, err := takeSample(ctx, p.s, time.Since(p.t0), phase)
	if err != nil {
		return smp, err
	}
	if p.last == nil {
		fmt.Fprintln(p.b.out, soakHeader)
		p.last = &smp
	}
	fmt.Fprintln(p.b.out, smp.row(*p.last))
	p.last = &smp
	return smp, nil
}

// run runs the traffic for d, then leaves the gateway alone for the
// settle period, and returns the last sample, labelled final.
func (p *soakPhases) run(ctx context.Context, d time.Duration, phase, final string) (soakSample, *tally, error) {
	r := &soakRun{ws: p.s.ws, base: "http://" + p.s.addr, t: newTally()}
	traffic, stopTraffic := context.WithTimeout(ctx, d)
	defer stopTraffic()
	actors := r.start(traffic)
	trafficDone := make(chan struct{})
	go func() {
		<-traffic.Done()
		actors.Wait()
		r.drains.Wait()
		close(trafficDone)
	}()
	tick := time.NewTicker(p.plan.Every)
	defer tick.Stop()
	var end <-chan time.Time // the end of the settle period, once the traffic's clients are all gone
	for {
		label := phase
		select {
		case <-ctx.Done():
			stopTraffic()
			<-trafficDone
			return soakSample{}, r.t, ctx.Err()
		case <-trafficDone:
			trafficDone = nil
			end = time.After(p.plan.Settle)
			phase, label = "settle", "stopped"
		case <-end:
			smp, err := p.sample(ctx, final)
			return smp, r.t, err
		case <-tick.C:
		}
		if _, err := p.sample(ctx, label); err != nil {
			stopTraffic()
			<-trafficDone
			return soakSample{}, r.t, err
		}
	}
}

func (b *bencher) soakReport(fresh, start, end soakSample, t *tally, plan soakPlan) {
	fmt.Fprintf(b.out, "\n# start (after the warm-up and its settle period) against end (after %s of traffic and the settle period)\n", plan.Duration)
	fmt.Fprintf(b.out, "%-18s %12s %12s %12s %10s  %-5s %s\n", "", "fresh", "start", "end", "change", "back", "slack")
	fr := compareEnds(fresh, fresh)
	for i, c := range compareEnds(start, end) {
		fmt.Fprintf(b.out, "%-18s %12s %12s %12s %10s  %-5s %s\n", c.Name, fr[i].Start, c.Start, c.End, c.Change, yesNo(c.Back), c.Slack)
	}
	m := end.metrics
	fmt.Fprintf(b.out, "\n# the gateway's counters at the end\n")
	fmt.Fprintf(b.out, "  envelopes accepted %.0f, deliveries %.0f, WebSocket messages out %.0f\n",
		m.get("mcpp_envelopes_in_total"), m.get("mcpp_envelopes_out_total"), m.get("mcpp_websocket_messages_out_total"))
	fmt.Fprintf(b.out, "  cuts: %s\n", formatCounts(m.byLabel("mcpp_cuts_total", "reason"), "none"))
	fmt.Fprintf(b.out, "  context conclusions: %s\n", formatCounts(m.byLabel("mcpp_context_conclusions_total", "reason"), "none"))
	fmt.Fprintf(b.out, "  refusals (system/error): %s\n", formatCounts(m.byLabel("mcpp_errors_total", "code"), "none"))
	fmt.Fprintf(b.out, "  upgrade refusals: %s\n", formatCounts(m.byLabel("mcpp_upgrade_refusals_total", "code"), "none"))
	fmt.Fprintf(b.out, "  history holds %.0f, republished late %.0f\n", m.get("mcpp_history_holds_total"), m.get("mcpp_history_late_total"))
	fmt.Fprintf(b.out, "\n# what the traffic did (client side)\n")
	t.report(b.out)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

// start launches every actor; they stop when ctx is done.
func (r *soakRun) start(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for i := 0; i < soakPods; i++ {
		for j := 0; j < 3; j++ {
			run(func() { r.chatter(ctx, i, j) })
		}
		run(func() { r.reasoner(ctx, i) })
		run(func() { r.filterer(ctx, i) })
	}
	run(func() { r.churn(ctx) })
	run(func() { r.flood(ctx) })
	run(func() { r.replayer(ctx) })
	run(func() { r.publisher(ctx) })
	return &wg
}

// pause waits about d (between d/2 and 3d/2); false once ctx is done.
func pause(ctx context.Context, d time.Duration) bool {
	d = d/2 + rand.N(d)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// failed records err as a problem unless the traffic is over.
func (r *soakRun) failed(ctx context.Context, what string, err error) {
	if ctx.Err() != nil || errors.Is(err, client.ErrClosed) {
		return
	}
	r.t.problem("%s: %v", what, err)
}

// dial joins pod as id; the client's events are counted by drain unless
// o says it reads them itself (read).
func (r *soakRun) dial(ctx context.Context, pod, id string, o client.Options) (*client.Client, error) {
	o.Pod, o.Participant = pod, id
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, r.ws, o)
	if err != nil {
		r.failed(ctx, "join "+pod+" as "+id, err)
		return nil, err
	}
	r.t.add("joins", 1)
	return c, nil
}

// drain counts c's events until it ends; pod is the index of a soak pod,
// or -1.
func (r *soakRun) drain(c *client.Client, pod int) {
	r.drains.Add(1)
	go func() {
		defer r.drains.Done()
		for ev := range c.Events() {
			r.count(ev, pod)
		}
		if err := c.Err(); err != nil && !errors.Is(err, client.ErrClosed) {
			r.t.problem("%s ended: %v", c.ID(), err)
		}
	}()
}

func (r *soakRun) count(ev client.Event, pod int) {
	switch ev := ev.(type) {
	case *client.Message:
		r.t.add("envelopes received", 1)
		if pod >= 0 && ev.ID != "" && ev.InHistory() {
			r.last[pod].Store(ev.ID)
		}
	case *client.GatewayError:
		r.t.add("refused: "+string(ev.Code), 1)
	case *client.ContextEvent:
		r.t.add("context events received", 1)
	case *client.Presence:
		r.t.add("presence events received", 1)
	case *client.Reconnected:
		r.t.add("reconnections", 1)
		if ev.Gap() {
			r.t.add("reconnections with a gap", 1)
		}
	}
}

func chat(text string, n int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"text": text, "n": n, "pad": strings.Repeat("·", 60)})
	return b
}

// send sends env with a bounded wait.
func (r *soakRun) send(ctx context.Context, c *client.Client, env *wire.Envelope) bool {
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.Send(sctx, env); err != nil {
		r.failed(ctx, c.ID()+" send "+env.Kind, err)
		return false
	}
	r.t.add("envelopes sent", 1)
	return true
}

// chatter j of pod i chats about once a second.
func (r *soakRun) chatter(ctx context.Context, i, j int) {
	o := client.Options{}
	if j == 2 {
		o.Filter = &wire.Filter{Batch: wire.Bool(true)}
	}
	id := fmt.Sprintf("chat-%d-%d", i, j)
	c, err := r.dial(ctx, soakPod(i), id, o)
	if err != nil {
		return
	}
	defer c.Close()
	r.drain(c, i)
	var transient []string
	for n := int64(0); pause(ctx, time.Second); n++ {
		env := &wire.Envelope{Kind: "chat", Payload: chat("hello", n)}
		switch n % 10 {
		case 3:
			env.To = []string{fmt.Sprintf("chat-%d-%d", i, (j+1)%3)}
		case 5:
			env.Lifecycle = &wire.Lifecycle{Mode: wire.ModeEphemeral}
		case 7:
			env.Kind = "activity"
			env.Lifecycle = &wire.Lifecycle{Mode: wire.ModeTransient, Summary: fmt.Sprintf("activity %d", n)}
		case 9:
			if len(transient) > 0 {
				env.Lifecycle = &wire.Lifecycle{Consumes: transient}
				transient = nil
			}
		}
		if !r.send(ctx, c, env) {
			continue
		}
		if env.Lifecycle != nil && env.Lifecycle.Mode == wire.ModeTransient {
			transient = append(transient, env.ID)
		}
		if j == 0 && n%30 == int64(10*i)%30 {
			// A burst within the rate limit's burst (200).
			for k := 0; k < 150 && ctx.Err() == nil; k++ {
				r.send(ctx, c, &wire.Envelope{Kind: "chat/burst", Payload: chat("burst", int64(k))})
			}
			r.t.add("bursts", 1)
		}
		if n%20 == int64(7*j)%20 {
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			if a, err := c.History(qctx, wire.HistoryRequest{Limit: 50}); err != nil {
				r.failed(ctx, id+" gateway/history", err)
			} else {
				r.t.add("history requests", 1)
				r.t.add("history envelopes answered", int64(len(a.Envelopes)))
			}
			if _, err := c.Contexts(qctx, wire.ContextsRequest{State: wire.StateAll, Limit: 20}); err != nil {
				r.failed(ctx, id+" gateway/contexts", err)
			} else {
				r.t.add("contexts requests", 1)
			}
			cancel()
		}
	}
}

// reasoner of pod i opens contexts, steps in them, and concludes two in
// three; the others time out.
func (r *soakRun) reasoner(ctx context.Context, i int) {
	id := fmt.Sprintf("reasoner-%d", i)
	c, err := r.dial(ctx, soakPod(i), id, client.Options{})
	if err != nil {
		return
	}
	defer c.Close()
	r.drain(c, i)
	for n := 0; pause(ctx, 3*time.Second); n++ {
		bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		root, err := c.Branch(bctx, "reasoning", "", "think")
		cancel()
		if err != nil {
			r.failed(ctx, id+" branch", err)
			continue
		}
		r.t.add("contexts opened", 1)
		steps := 2 + rand.IntN(5)
		for k := 0; k < steps && pause(ctx, 150*time.Millisecond); k++ {
			r.send(ctx, c, &wire.Envelope{Kind: "reasoning/step", Context: root.JSON(), Payload: chat("step", int64(k))})
		}
		if n%3 == 1 {
			bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			child, err := c.Branch(bctx, "reasoning", root.ID, "a detail")
			cancel()
			if err == nil {
				r.t.add("contexts opened", 1)
				r.send(ctx, c, &wire.Envelope{Kind: "reasoning/step", Context: child.JSON(), Payload: chat("detail", 0)})
			} else {
				r.failed(ctx, id+" branch child", err)
			}
		}
		if n%3 == 2 {
			r.t.add("contexts left to time out", 1)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if _, err := c.Conclude(cctx, root.ID, "done"); err != nil {
			r.failed(ctx, id+" conclude", err)
		} else {
			r.t.add("contexts concluded by their author", 1)
		}
		cancel()
	}
}

var soakFilters = []wire.Filter{
	{Contexts: wire.ContextsNone},
	{Contexts: wire.ContextsNone, Types: []string{"reasoning"}},
	{Contexts: wire.ContextsAll, Types: []string{}, ExcludeTypes: []string{"reasoning"}},
	{ExcludeTypes: []string{}, Routing: wire.RoutingDirected},
	{Routing: wire.RoutingAll, Contexts: wire.ContextsNone, Conclusions: wire.Bool(true), Batch: wire.Bool(true)},
	{Main: wire.Bool(false), Contexts: wire.ContextsAll, Conclusions: wire.Bool(false), Batch: wire.Bool(false), Echo: wire.Bool(true)},
	{Main: wire.Bool(true), Echo: wire.Bool(false)},
}

// filterer of pod i changes its filter every 5 s or so.
func (r *soakRun) filterer(ctx context.Context, i int) {
	id := fmt.Sprintf("filter-%d", i)
	c, err := r.dial(ctx, soakPod(i), id, client.Options{})
	if err != nil {
		return
	}
	defer c.Close()
	r.drain(c, i)
	for n := 0; pause(ctx, 5*time.Second); n++ {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := c.SetFilter(fctx, soakFilters[n%len(soakFilters)])
		cancel()
		if err != nil {
			r.failed(ctx, id+" gateway/filter", err)
			continue
		}
		r.t.add("filter changes", 1)
	}
}

// churn joins and leaves, 4 times a second or so.
func (r *soakRun) churn(ctx context.Context) {
	for pause(ctx, 250*time.Millisecond) {
		n := r.seq.Add(1)
		id := fmt.Sprintf("churn-%d", n)
		pod := soakPod(int(n) % soakPods)
		if n%2 == 1 {
			pod = id // a pod of its own
		}
		if n%4 < 2 {
			// With the client: some send first, some open a context
			// (its pod then lives on until the context is forgotten).
			c, err := r.dial(ctx, pod, id, client.Options{Reconnect: client.Reconnect{Disable: true}})
			if err != nil {
				continue
			}
			switch n % 12 {
			case 0, 4:
				r.send(ctx, c, &wire.Envelope{Kind: "chat", Payload: chat("passing by", n)})
			case 1:
				bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if _, err := c.Branch(bctx, "task", "", "short-lived"); err != nil {
					r.failed(ctx, id+" branch", err)
				} else {
					r.t.add("contexts opened", 1)
				}
				cancel()
			}
			_ = c.Close()
			r.t.add("churn: left with a closing handshake", 1)
			continue
		}
		// Raw: read the welcome, then close or drop the connection.
		c, err := (Load{URL: r.ws}).dial(ctx, pod, id)
		if err != nil {
			r.failed(ctx, "churn join "+id, err)
			continue
		}
		r.t.add("joins", 1)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = c.Read(rctx, nil)
		cancel()
		if err != nil {
			r.failed(ctx, id+" welcome", err)
		}
		if n%4 == 2 {
			_ = c.Close()
			r.t.add("churn: left with a closing handshake", 1)
		} else {
			_ = c.CloseNow()
			r.t.add("churn: dropped the connection", 1)
		}
	}
}

// flood: every minute, in pod soak-flood, a sender sends 300 envelopes of
// 128 KiB as fast as it can while a reader there has stopped reading.
func (r *soakRun) flood(ctx context.Context) {
	const pod = "soak-flood"
	watcher, err := r.dial(ctx, pod, "watcher", client.Options{Filter: &wire.Filter{Batch: wire.Bool(true)}})
	if err != nil {
		return
	}
	defer watcher.Close()
	r.drain(watcher, -1)
	flooder, err := r.dial(ctx, pod, "flooder", client.Options{})
	if err != nil {
		return
	}
	defer flooder.Close()
	r.drain(flooder, -1)
	payload := json.RawMessage(`{"p":"` + strings.Repeat("f", 128<<10-16) + `"}`)
	first := true
	for n := 1; ; n++ {
		wait := time.Minute
		if first {
			wait, first = 20*time.Second, false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		id := fmt.Sprintf("stalled-%d", n)
		stalled, err := (Load{URL: r.ws}).dial(ctx, pod, id)
		if err != nil {
			r.failed(ctx, "join "+id, err)
			continue
		}
		r.t.add("joins", 1)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = stalled.Read(rctx, nil) // its welcome; then it reads nothing
		cancel()
		if err != nil {
			r.failed(ctx, id+" welcome", err)
			_ = stalled.CloseNow()
			continue
		}
		for k := 0; k < 300 && ctx.Err() == nil; k++ {
			r.send(ctx, flooder, &wire.Envelope{Kind: "flood", Payload: payload})
		}
		r.t.add("floods", 1)
		// The reader reads again: it must find its connection cut.
		f := readAgain(context.Background(), []*stalledPod{{reader: stalled}}, 15*time.Second)[0]
		r.t.add("stalled readers: "+f.how, 1)
		if f.how == "still open" {
			r.t.problem("%s was not cut by a flood of 300 × 128 KiB", id)
		}
		_ = stalled.CloseNow()
	}
}

// replayer joins with history=N or resume=ID every 10 s or so, and asks
// for history over POST.
func (r *soakRun) replayer(ctx context.Context) {
	for n := 0; pause(ctx, 10*time.Second); n++ {
		i := n % soakPods
		id := fmt.Sprintf("replay-%d", n)
		o := client.Options{Reconnect: client.Reconnect{Disable: true}}
		resume := n%2 == 1
		if resume {
			last, _ := r.last[i].Load().(string)
			if last == "" {
				continue
			}
			o.Resume = last
		} else {
			o.History = 10 + rand.IntN(291)
		}
		r.replay(ctx, soakPod(i), id, o)
		if n%3 == 0 {
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := client.Ask(qctx, r.base, client.PublishOptions{Pod: soakPod(i), Participant: "asker"},
				wire.RequestHistory, wire.HistoryRequest{Limit: 20})
			cancel()
			if err != nil {
				r.failed(ctx, "POST gateway/history", err)
			} else {
				r.t.add("history requests over POST", 1)
			}
		}
	}
}

// replay joins with o (history= or resume=), reads what the welcome says
// is replayed, and leaves.
func (r *soakRun) replay(ctx context.Context, pod, id string, o client.Options) {
	c, err := r.dial(ctx, pod, id, o)
	if err != nil {
		return
	}
	defer c.Close()
	w := c.Welcome()
	if w.History == nil {
		r.t.problem("%s: the welcome says nothing of history (history=%d resume=%q)", id, o.History, o.Resume)
		return
	}
	if o.Resume != "" {
		if w.History.Resumed != nil && *w.History.Resumed {
			r.t.add("resumes: resumed", 1)
		} else {
			r.t.add("resumes: not resumed (a gap)", 1)
		}
	} else {
		r.t.add("history=N joins", 1)
	}
	want := w.History.Replayed
	got := 0
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got < want {
		ev, err := c.Next(rctx)
		if err != nil {
			r.failed(ctx, fmt.Sprintf("%s: replay (%d of %d)", id, got, want), err)
			break
		}
		switch ev.(type) {
		case *client.Message, *client.ContextEvent:
			got++
		}
	}
	r.t.add("envelopes replayed", int64(got))
}

// publisher publishes over POST about once a second.
func (r *soakRun) publisher(ctx context.Context) {
	for n := int64(0); pause(ctx, time.Second); n++ {
		pod := soakPod(int(n) % soakPods)
		if n%10 == 9 {
			pod = fmt.Sprintf("post-%d", n)
		}
		envs := make([]*wire.Envelope, 1+n%3)
		for k := range envs {
			envs[k] = &wire.Envelope{Kind: "webhook", Payload: chat("from a webhook", n)}
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := client.Publish(pctx, r.base, client.PublishOptions{Pod: pod, Participant: "webhook"}, envs...)
		cancel()
		if err != nil {
			r.failed(ctx, "POST "+pod, err)
			continue
		}
		for _, x := range res {
			if err := client.ResultError(x); err != nil {
				r.t.add("POST refused: "+err.Error(), 1)
			} else {
				r.t.add("POST envelopes published", 1)
			}
		}
		if n%5 == 2 {
			qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := client.Ask(qctx, r.base, client.PublishOptions{Pod: pod, Participant: "asker"},
				wire.RequestContexts, wire.ContextsRequest{State: wire.StateAll})
			cancel()
			if err != nil {
				r.failed(ctx, "POST gateway/contexts", err)
			} else {
				r.t.add("contexts requests over POST", 1)
			}
		}
	}
}
