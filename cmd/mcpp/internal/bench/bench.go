package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcpp/gateway/client"
)

const usage = `Usage: mcpp bench [flags]

Measures fan-out: P publishers send envelopes of --size bytes to N
subscribers of one pod, flat out within --window envelopes in flight, or at
--rate envelopes a second. Reports deliveries a second, end-to-end latency
(p50/p99/p999), envelopes per WebSocket message and, when bench starts the
servers itself (no --gateway), each server's CPU time per delivery.

  mcpp bench --subscribers 100                       # the gateway, started by bench
  mcpp bench --subscribers 100 --baseline --rounds 3 # alternated with the bare relay
  mcpp bench --subscribers 100 --batch               # subscribers join with batch=1
  mcpp bench --subscribers 100 --filters             # half contexts=none, half the envelopes in a context
  mcpp bench --subscribers 100 --baseline --latency-at 0.25,0.5,0.75
  mcpp bench --subscribers 100 --baseline --peer nats # and nats-server over WebSocket, same load
  mcpp bench --subscribers 100 --versus "--history 0" # and the gateway with other flags
  mcpp bench --subscribers 100 --versus "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"
                                                     # and with tracing on (NAME=VALUE words: its environment)
  mcpp bench --idle 10000 --baseline                 # RSS per idle connection
  mcpp bench --stalled 100 --size 1000000 --stalled-envelopes 64  # RSS with readers that stop reading
  mcpp bench --soak 30m                              # mixed traffic; resources per minute, start against end
  mcpp bench --pods 6000 --members 3                 # many small pods: joins admitted, RSS a pod, latency, losses
  mcpp bench --pods 6000 --versus "--history 0" --peer nats --rounds 2   # the same pods on each server in turn
  mcpp bench --gateway ws://HOST:PORT --subscribers 10   # a gateway that runs elsewhere
  mcpp bench --gateway ws://A:8081,ws://B:8082           # a cluster: subscribers spread over the nodes

--pods N (many small pods) runs each server in turn, a fresh process for
each run: the gateway (with --gateway-args), the gateway again with the
flags of each --versus (the flag may be given several times, e.g.
--versus "--history 0"), and with --peer nats nats-server over its own
WebSocket listener (the same pods: a subject each, the same envelopes,
pacing and counting, driven with nats.go). Each run reports joins
admitted, latency (p50, p99, p999, max), memory a pod (the server's RSS
growth over the joins, divided by the pods), CPU a delivery (the server's
CPU time in the window over the deliveries in it), envelopes lost, and the
server's garbage collections whose mark overlaps the window (each server
runs with GODEBUG=gctrace=1: their count, their mark's wall time in all
and the longest, their assists' CPU time); then the servers side by side,
the medians over --rounds (1 unless given, for --pods). The window
(--duration) defaults to 60s from 6000 pods, 30s from 1000, 10s below, so
that every server collects inside it. bench's own collector is off in the
window (a memory limit guards it) and what it did anyway is reported.
--json prints the same as one JSON object on stdout, each run's text
going to stderr as it ends. A --history-dir among the gateway's flags
gets a fresh directory inside it for each run. Past 20000 connections
they come from several loopback source addresses (127.0.0.1, 127.0.0.2,
...). bench and the server each need a file a connection (ulimit -n).
bench needs no Go toolchain: nats-server is compiled into mcpp (the hidden
mcpp _nats), and the gateway is --gateway-bin, or mcpp-gateway next to
mcpp or on PATH.

  mcpp bench --pods 1000 --versus "--history 0" --peer nats --rounds 2 --json > pods.json
  mcpp bench --pods 20000 --gateway-args "--history-dir /var/tmp/h" --versus "--history 0 --history-dir=" --peer nats

Flags:
`

// Run is `mcpp bench`; it returns the process's exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcpp bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		gw         = fs.String("gateway", "", "WebSocket URL of a running gateway (ws://HOST:PORT or …/ws), or several nodes of one cluster, comma-separated: publishers use the first, subscribers are spread over all; empty: start mcpp-gateway")
		gwBin      = fs.String("gateway-bin", "", "mcpp-gateway binary to start (default: next to mcpp, or on PATH)")
		token      = fs.String("token", os.Getenv("MCPP_TOKEN"), "token for --gateway")
		pod        = fs.String("pod", "bench", "pod name")
		subs       = fs.Int("subscribers", 100, "subscribers (N)")
		pubs       = fs.Int("publishers", 1, "publishers (P)")
		size       = fs.Int("size", 256, "envelope size in bytes")
		duration   = fs.Duration("duration", 5*time.Second, "measured time of each run (--pods: the window, default 60s from 6000 pods, 30s from 1000, 10s below)")
		warmup     = fs.Duration("warmup", 2*time.Second, "time before measuring")
		window     = fs.Int("window", 256, "envelopes in flight when flat out")
		rate       = fs.Float64("rate", 0, "envelopes a second in all (0: flat out)")
		filters    = fs.Bool("filters", false, "half the subscribers contexts=none, half the envelopes in a reasoning context")
		batch      = fs.Bool("batch", false, "subscribers join with batch=1")
		baseline   = fs.Bool("baseline", false, "alternate each run with the bare WebSocket relay and report gateway/baseline")
		rounds     = fs.Int("rounds", 3, "rounds (gateway, then baseline, then peer in each; --pods: the gateway, each --versus, then nats, and 1 round unless given)")
		peer       = fs.String("peer", "", "also measure another server in each round, with the same load: nats (a nats-server over WebSocket, driven with nats.go), and report gateway/peer; with --pods too")
		latencyAt  = fs.String("latency-at", "", "after the flat-out rounds, measure latency at these fractions of each server's capacity (e.g. 0.25,0.5,0.75)")
		sameLoad   = fs.Bool("latency-same-load", false, "--latency-at: drive every server at the fraction of the gateway's capacity, not of its own (the same load for all)")
		idle       = fs.Int("idle", 0, "instead of traffic: open this many idle connections and report RSS per connection")
		gatewayArg = fs.String("gateway-args", "", "extra flags for the started gateway (space-separated)")
		versus     stringList
		stalled    = fs.Int("stalled", 0, "instead of fan-out: this many pods, each one sender and one reader that stops reading; report the gateway's RSS peak and end, and its cuts (the gateway runs with its defaults but the rates)")
		stalledN   = fs.Int("stalled-envelopes", 64, "--stalled: envelopes of --size bytes each sender sends")
		settle     = fs.Duration("settle", 0, "--stalled: wait after the last envelope is accepted before the end figures (default 2m30s: the Go runtime collects at least every 2 minutes, then gives memory back); --soak: time without traffic after the warm-up and at the end (default 5m)")
		soak       = fs.Duration("soak", 0, "instead of fan-out: this long of mixed traffic against one gateway (churn, contexts, filters, floods, stalls, history, POST); its resources every --sample-every, and at the start against the end")
		sampleFor  = fs.Duration("sample-every", time.Minute, "--soak: how often the gateway's resources are sampled")
		soakWarmup = fs.Duration("soak-warmup", 2*time.Minute, "--soak: traffic (and a settle period) before the start is taken")
		pods       = fs.Int("pods", 0, "instead of fan-out: this many pods of --members participants, one of whom sends --pod-rate envelopes a second for --duration; report joins admitted, latency, memory a pod, CPU a delivery, losses and the server's collections, on the gateway, each --versus and --peer nats (with --gateway, several nodes: members spread over them)")
		members    = fs.Int("members", 3, "--pods: participants a pod")
		podRate    = fs.Float64("pod-rate", 1, "--pods: envelopes a second each pod's sender sends")
		dialers    = fs.Int("dialers", 64, "--pods: joins under way at once")
		asJSON     = fs.Bool("json", false, "--pods: print the runs and the medians as one JSON object instead of text (each run's text then goes to stderr)")
	)
	fs.Var(&versus, "versus", "also alternate with the gateway started with these extra flags (space-separated, e.g. \"--history 0\"; NAME=VALUE words are its environment, e.g. \"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318\" for tracing on), reported as versus, and report gateway/versus; with --pods it may be given several times, a row each")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if fs.NArg() > 0 || *subs < 1 || *pubs < 1 || *size < 64 || *rounds < 1 || (*gw != "" && (*baseline || len(versus) > 0)) {
		fmt.Fprintln(stderr, "mcpp bench: bad arguments (--baseline needs bench to start the servers itself; --size at least 64)")
		return 2
	}
	if msg := checkPods(*pods, *podRate, *members, len(versus), *baseline, *asJSON, *idle > 0 || *stalled != 0 || *soak != 0); msg != "" {
		fmt.Fprintln(stderr, "mcpp bench:", msg)
		return 2
	}
	if *stalled != 0 {
		if *settle == 0 {
			*settle = 150 * time.Second
		}
		sl := stalledLoad{Pods: *stalled, Envelopes: *stalledN, Size: *size, Settle: *settle}
		other := *baseline || len(versus) > 0 || *peer != "" || *idle > 0 || *soak != 0
		if msg := checkStalled(sl, *gw != "", other, memAvailable()); msg != "" {
			fmt.Fprintln(stderr, "mcpp bench:", msg)
			return 2
		}
	}
	if *soak != 0 {
		if *settle == 0 {
			*settle = 5 * time.Minute
		}
		other := *baseline || len(versus) > 0 || *peer != "" || *idle > 0 || *stalled != 0
		plan := soakPlan{Warmup: *soakWarmup, Duration: *soak, Settle: *settle, Every: *sampleFor}
		if msg := checkSoak(plan, *gw != "", other); msg != "" {
			fmt.Fprintln(stderr, "mcpp bench:", msg)
			return 2
		}
	}
	if msg := checkPeer(*peer, *gw != "", *filters, *idle > 0); msg != "" {
		fmt.Fprintln(stderr, "mcpp bench:", msg)
		return 2
	}
	var fractions []float64
	for _, f := range strings.Split(*latencyAt, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v > 1 {
			fmt.Fprintln(stderr, "mcpp bench: --latency-at takes fractions in (0, 1]")
			return 2
		}
		fractions = append(fractions, v)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	b := &bencher{out: stdout, progress: stderr, gwBin: *gwBin, gwArgs: strings.Fields(*gatewayArg), versusArgs: strings.Fields(versus.last()), sameLoad: *sameLoad}
	load := Load{Token: *token, Pod: *pod, Subscribers: *subs, Publishers: *pubs, Size: *size,
		Warmup: *warmup, Duration: *duration, Window: *window, Rate: *rate, Filters: *filters, Batch: *batch}
	var err error
	switch {
	case *pods > 0:
		window, n := *duration, *rounds
		if !given["duration"] {
			window = podsWindow(*pods)
		}
		if !given["rounds"] {
			n = 1
		}
		plan := podsPlan{load: podsLoad{Pods: *pods, Members: *members, Rate: *podRate, Duration: window, Size: *size,
			Dialers: max(1, *dialers), Settle: podsSettle(*pods * *members), Drain: podsDrain},
			rounds: n, token: *token, json: *asJSON}
		var vs [][]string
		for _, v := range versus {
			vs = append(vs, strings.Fields(v))
		}
		plan.servers = podsServers(vs, *peer == "nats")
		if *gw != "" {
			for _, u := range strings.Split(*gw, ",") {
				plan.remote = append(plan.remote, wsURL(strings.TrimSpace(u)))
			}
		}
		err = b.pods(ctx, plan)
	case *stalled > 0:
		err = b.stalled(ctx, stalledLoad{Pods: *stalled, Envelopes: *stalledN, Size: *size, Settle: *settle})
	case *soak > 0:
		err = b.soak(ctx, soakPlan{Warmup: *soakWarmup, Duration: *soak, Settle: *settle, Every: *sampleFor})
	case *idle > 0:
		err = b.idle(ctx, *idle, *baseline)
	case *gw != "":
		for _, u := range strings.Split(*gw, ",") {
			load.SubscriberURLs = append(load.SubscriberURLs, wsURL(strings.TrimSpace(u)))
		}
		load.URL = load.SubscriberURLs[0]
		var r Result
		if r, err = load.run(ctx); err == nil {
			b.report("gateway", 1, load, r)
		}
	default:
		kinds := []kind{kindGateway}
		if len(versus) > 0 {
			kinds = append(kinds, kindVersus)
		}
		if *baseline {
			kinds = append(kinds, kindRelay)
		}
		if *peer == "nats" {
			kinds = append(kinds, kindNATS)
		}
		err = b.rounds(ctx, load, *rounds, kinds, fractions)
	}
	if err != nil {
		fmt.Fprintln(stderr, "mcpp bench:", err)
		return 1
	}
	return 0
}

// checkPods says what is wrong with the --pods flags of this command
// line, or "".
func checkPods(pods int, rate float64, members, versus int, baseline, asJSON, otherMode bool) string {
	switch {
	case pods < 0:
		return "--pods takes a number of pods"
	case pods == 0 && asJSON:
		return "--json goes with --pods"
	case pods == 0 && versus > 1:
		return "--versus may be given once, but with --pods"
	case pods == 0:
		return ""
	case rate <= 0:
		return "--pod-rate must be above 0"
	case members < 2:
		return "--members must be at least 2: a sender and a receiver"
	case baseline:
		return "--pods does not take --baseline (its servers are the gateway, --versus and --peer nats)"
	case otherMode:
		return "--pods does not go with --idle, --stalled or --soak"
	}
	return ""
}

// stringList is a flag that may be given several times.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, "; ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// last is the value given last ("" when none was).
func (s stringList) last() string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// checkPeer says what is wrong with --peer in this command line, or "".
func checkPeer(peer string, remoteGateway, filters, idle bool) string {
	switch {
	case peer == "":
		return ""
	case peer != "nats":
		return fmt.Sprintf("--peer %q: the only peer is nats", peer)
	case remoteGateway:
		return "--peer needs bench to start the servers itself (no --gateway)"
	case filters:
		// NATS has no per-subscriber filter to compare with.
		return "--peer nats does not take --filters"
	case idle:
		return "--peer nats measures traffic, not idle connections"
	}
	return ""
}

// wsURL accepts ws://HOST:PORT or the full …/ws URL.
func wsURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Path == "" || u.Path == "/" {
		return strings.TrimSuffix(s, "/") + "/ws"
	}
	return s
}

type bencher struct {
	out        io.Writer
	progress   io.Writer // --pods --json: each run's text as it ends
	gwBin      string
	gwArgs     []string
	versusArgs []string
	// sameLoad drives every server at the gateway's rate in the latency
	// rounds (--latency-same-load).
	sameLoad bool
}

type kind int

const (
	kindGateway kind = iota
	kindRelay
	kindNATS   // --peer nats
	kindVersus // --versus: the gateway with other flags
)

func (k kind) String() string { return [...]string{"gateway", "baseline", "nats", "versus"}[k] }

func (b *bencher) start(k kind) (*server, error) {
	switch k {
	case kindRelay:
		return startRelayProcess()
	case kindNATS:
		return startNATSProcess()
	}
	bin, err := gatewayBinary(b.gwBin)
	if err != nil {
		return nil, err
	}
	if k == kindVersus {
		env, flags := versusEnv(b.versusArgs)
		return startGatewayProcessWith(bin, append(append([]string{}, b.gwArgs...), flags...), procOptions{env: env})
	}
	return startGatewayProcess(bin, b.gwArgs)
}

// versusEnv splits the words of --versus into the environment variables
// they set (NAME=VALUE words, as a shell writes them before a command:
// "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", which turns the
// gateway's tracing on) and the gateway's flags.
func versusEnv(words []string) (env, flags []string) {
	for _, w := range words {
		if name, _, ok := strings.Cut(w, "="); ok && envName(name) {
			env = append(env, w)
			continue
		}
		flags = append(flags, w)
	}
	return env, flags
}

// envName reports whether s is an environment variable's name as the
// OTEL_ and MCPP_ variables are: upper-case letters, digits and _.
func envName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// once starts a fresh server, runs the load against it and stops it.
func (b *bencher) once(ctx context.Context, k kind, load Load) (Result, error) {
	s, err := b.start(k)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	load.URL, load.ServerPID = s.ws, s.pid()
	if k == kindNATS {
		return load.runNATS(ctx)
	}
	return load.run(ctx)
}

// rounds alternates the servers of kinds (the gateway first) in every
// round, so that whatever else loads the machine hits them alike and each
// ratio compares figures of one run; then it measures latency at fractions
// of each one's own capacity.
func (b *bencher) rounds(ctx context.Context, load Load, rounds int, kinds []kind, fractions []float64) error {
	batch := fmt.Sprint(load.Batch)
	if load.Batch && len(kinds) > 1 {
		batch += " (gateway subscribers only: the baseline sends one envelope per message, NATS coalesces by itself)"
	}
	fmt.Fprintf(b.out, "# N=%d subscribers, P=%d publishers, %d B envelopes, %s per run, batch=%s, filters=%v, %s\n",
		load.Subscribers, load.Publishers, load.Size, load.Duration, batch, load.Filters, modeOf(load))
	results := map[kind][]Result{}
	for r := 1; r <= rounds; r++ {
		for _, k := range kinds {
			res, err := b.once(ctx, k, load)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", k, r, err)
			}
			results[k] = append(results[k], res)
			b.report(k.String(), r, load, res)
		}
	}
	b.summary(results, kinds)
	b.table("medians", results, kinds)
	if len(fractions) == 0 {
		return nil
	}
	for _, f := range fractions {
		lat := map[kind][]Result{}
		for r := 1; r <= rounds; r++ {
			for _, k := range kinds {
				l := load
				base := k
				if b.sameLoad {
					base = kindGateway
				}
				l.Rate = f * median(results[base], Result.EnvelopesPerSec)
				res, err := b.once(ctx, k, l)
				if err != nil {
					return fmt.Errorf("%s latency round %d: %w", k, r, err)
				}
				lat[k] = append(lat[k], res)
				b.report(fmt.Sprintf("%s@%.0f%%", k, f*100), r, l, res)
			}
		}
		of := "of capacity"
		if b.sameLoad {
			of = "of the gateway's capacity, every server"
		}
		line := fmt.Sprintf("latency at %.0f%% %s: gateway p50 %s p99 %s p999 %s",
			f*100, of, short(medianDur(lat[kindGateway], 0.5)), short(medianDur(lat[kindGateway], 0.99)), short(medianDur(lat[kindGateway], 0.999)))
		g99 := medianDur(lat[kindGateway], 0.99)
		for _, k := range kinds[1:] {
			line += fmt.Sprintf("; %s p50 %s p99 %s p999 %s; p99 gateway/%s %.2f",
				k, short(medianDur(lat[k], 0.5)), short(medianDur(lat[k], 0.99)), short(medianDur(lat[k], 0.999)),
				k, ratio(float64(g99), float64(medianDur(lat[k], 0.99))))
		}
		fmt.Fprintln(b.out, line)
		b.table(fmt.Sprintf("medians @%.0f%%", f*100), lat, kinds)
	}
	return nil
}

func modeOf(l Load) string {
	if l.Rate > 0 {
		return fmt.Sprintf("rate %.0f/s", l.Rate)
	}
	return fmt.Sprintf("flat out, window %d", l.Window)
}

func (b *bencher) report(name string, round int, l Load, r Result) {
	line := fmt.Sprintf("%-14s round %d: %10.0f deliveries/s %9.0f envelopes/s  p50 %-9s p99 %-9s p999 %-9s  %.1f envelopes/ws-message",
		name, round, r.DeliveriesPerSec(), r.EnvelopesPerSec(),
		short(r.Latency.quantile(0.5)), short(r.Latency.quantile(0.99)), short(r.Latency.quantile(0.999)), r.EnvelopesPerMessage())
	if r.ServerCPU > 0 {
		line += fmt.Sprintf("  server CPU %.2f µs/delivery, %.0f deliveries/CPU-s",
			float64(r.CPUPerDelivery().Nanoseconds())/1000, r.DeliveriesPerCPUSecond())
	}
	if r.Cut > 0 || r.Dropped > 0 {
		line += fmt.Sprintf("  LOST: %d subscribers cut, %d messages dropped", r.Cut, r.Dropped)
	}
	fmt.Fprintln(b.out, line)
}

// summary is the one line of medians and gateway/other ratios.
func (b *bencher) summary(results map[kind][]Result, kinds []kind) {
	g := results[kindGateway]
	gm := median(g, Result.DeliveriesPerSec)
	line := fmt.Sprintf("median: gateway %.0f deliveries/s, %.2f µs CPU/delivery, p99 %s",
		gm, median(g, cpuMicros), short(medianDur(g, 0.99)))
	for _, k := range kinds[1:] {
		r := results[k]
		m := median(r, Result.DeliveriesPerSec)
		line += fmt.Sprintf("; %s %.0f deliveries/s, %.2f µs CPU/delivery, p99 %s; gateway/%s %.2f",
			k, m, median(r, cpuMicros), short(medianDur(r, 0.99)), k, ratio(gm, m))
	}
	fmt.Fprintln(b.out, line)
}

// table prints the medians of every figure for each server, then
// gateway/other for each: above 1 the gateway delivers more, delivers more
// per CPU-second, packs more envelopes per message, or is slower (latency).
func (b *bencher) table(title string, results map[kind][]Result, kinds []kind) {
	if len(kinds) < 2 {
		return
	}
	figures := []func(Result) float64{
		Result.DeliveriesPerSec, Result.EnvelopesPerMessage, Result.DeliveriesPerCPUSecond,
		latencyOf(0.5), latencyOf(0.99), latencyOf(0.999),
	}
	med := func(k kind) []float64 {
		v := make([]float64, len(figures))
		for i, f := range figures {
			v[i] = median(results[k], f)
		}
		return v
	}
	fmt.Fprintf(b.out, "%-17s %13s %16s %16s %9s %9s %9s\n", "("+title+")", "deliveries/s", "envelopes/ws-msg", "deliveries/CPU-s", "p50", "p99", "p999")
	for _, k := range kinds {
		v := med(k)
		fmt.Fprintf(b.out, "%-17s %13.0f %16.1f %16.0f %9s %9s %9s\n", k, v[0], v[1], v[2],
			short(time.Duration(v[3])), short(time.Duration(v[4])), short(time.Duration(v[5])))
	}
	g := med(kindGateway)
	for _, k := range kinds[1:] {
		v := med(k)
		fmt.Fprintf(b.out, "%-17s %13.2f %16.2f %16.2f %9.2f %9.2f %9.2f\n", "gateway/"+k.String(),
			ratio(g[0], v[0]), ratio(g[1], v[1]), ratio(g[2], v[2]), ratio(g[3], v[3]), ratio(g[4], v[4]), ratio(g[5], v[5]))
	}
}

func latencyOf(q float64) func(Result) float64 {
	return func(r Result) float64 { return float64(r.Latency.quantile(q)) }
}

// ratio is a/b, or 0 when there is no b to divide by.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// short rounds d to three significant digits.
func short(d time.Duration) time.Duration {
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d
}

func cpuMicros(r Result) float64 { return float64(r.CPUPerDelivery().Nanoseconds()) / 1000 }

func median(rs []Result, f func(Result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func medianDur(rs []Result, q float64) time.Duration {
	return time.Duration(median(rs, latencyOf(q)))
}

// idle opens n idle connections and reports the server's RSS growth per
// connection.
func (b *bencher) idle(ctx context.Context, n int, baseline bool) error {
	kinds := []kind{kindGateway}
	if baseline {
		kinds = append(kinds, kindRelay)
	}
	per := map[kind]float64{}
	for _, k := range kinds {
		s, err := b.start(k)
		if err != nil {
			return err
		}
		v, err := idleRSS(ctx, s, n)
		s.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		per[k] = v
		fmt.Fprintf(b.out, "%-8s %d idle connections: %.1f KiB RSS per connection\n", k, n, v/1024)
	}
	if baseline {
		fmt.Fprintf(b.out, "gateway/baseline RSS per idle connection: %.2f\n", per[kindGateway]/per[kindRelay])
	}
	return nil
}

func idleRSS(ctx context.Context, s *server, n int) (float64, error) {
	time.Sleep(500 * time.Millisecond)
	before, err := rss(s.pid())
	if err != nil {
		return 0, err
	}
	l := Load{URL: s.ws}
	conns := make([]*client.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.CloseNow()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := l.dial(ctx, fmt.Sprintf("idle-%d", i/1000), fmt.Sprintf("idle-%d", i))
		if err != nil {
			return 0, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		go func() {
			var buf []byte
			for {
				var err error
				if buf, err = c.Read(ctx, buf[:0]); err != nil {
					return
				}
			}
		}()
	}
	// Long enough for the writers to go idle once the presence of the
	// last joins is out (the gateway lets an idle writer go after 1-2 s).
	time.Sleep(4 * time.Second)
	after, err := rss(s.pid())
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}
