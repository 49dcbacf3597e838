package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpp/gateway/audit"
	"github.com/mcpp/gateway/capability"
	"github.com/mcpp/gateway/gateway/mcpendpoint"
	"github.com/mcpp/gateway/history"
	"github.com/mcpp/gateway/participant"
	"github.com/mcpp/gateway/pod"
	"github.com/mcpp/gateway/tokens"
	"github.com/mcpp/gateway/wire"
)

// Gateway is one gateway node: its HTTP server, its NATS connection and
// the pods it serves.
type Gateway struct {
	cfg            Config
	log            *slog.Logger
	nodeID         string
	verifier       *tokens.Verifier // nil in open mode
	oauth          *oauthResource   // nil without --oauth-issuer
	defaultCaps    *capability.Set  // --default-capabilities, in open mode
	life           context.Context  // ends at Shutdown: the token watchers
	endLife        context.CancelFunc
	originPatterns []string

	ns      *server.Server // nil with --nats-url
	nc      *nats.Conn
	reads   []*nats.Conn // the history's reads (startNATS)
	tempDir string       // the embedded JetStream's own directory, removed at shutdown
	cluster *cluster     // nil when the gateway serves its pods alone
	metrics *metrics
	mcp     *mcpendpoint.Endpoint // /mcp

	// audit is the trail of trust decisions (--audit-log; nil: off),
	// trusted what the tokens held at their last reload, to tell what the
	// next one changes (audit.go).
	audit     *audit.Log
	trustedMu sync.Mutex
	trusted   tokens.Trusted

	// node is what the pods share, and their table (package pod: every
	// way into a pod is node.Enter). Its History and Writer are set once
	// the history stream is open (histReady, the node's HistoryOpen): in a
	// cluster the stream can be made only once enough nodes are up, so it
	// opens in the background, and no pod is made before.
	node      *pod.Node
	hist      *history.Stream
	histReady chan struct{}
	histStop  context.CancelFunc

	connCount   atomic.Int64
	accepting   atomic.Bool
	shutting    atomic.Bool    // Shutdown has begun
	drainDone   chan struct{}  // closed once the drain is over (drain.go)
	drained     drainResult    // what it did, written before drainDone closes
	handlers    sync.WaitGroup // WebSocket handlers and their readers (enter)
	enterMu     sync.Mutex     // orders each handlers.Add before Shutdown's Wait
	janitorDone chan struct{}
	janitorStop chan struct{}

	httpServer *http.Server
	certs      *certificates // --tls-cert and --tls-key; nil without TLS
	listenerMu sync.Mutex
	listener   net.Listener
}

// New builds a gateway and starts its embedded NATS server. Serve or
// ListenAndServe then accepts participants.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxPods = cfg.PodsMemoryHolds()
	g := &Gateway{
		cfg: cfg, log: cfg.logger(), nodeID: uuid.NewString()[:8],
		originPatterns: splitComma(cfg.AllowedOrigins),
		janitorDone:    make(chan struct{}),
		drainDone:      make(chan struct{}),
		janitorStop:    make(chan struct{}),
	}
	if cfg.MaxMemory > 0 {
		// The process's soft limit: the garbage collector works harder as
		// the heap nears it (it bounds nothing by itself; the limits do).
		debug.SetMemoryLimit(int64(cfg.MaxMemory))
	}
	defaults, err := cfg.defaultCapabilities()
	if err != nil {
		return nil, fmt.Errorf("--default-capabilities: %w", err)
	}
	g.defaultCaps = capability.MustCompile(defaults) // Validate compiled it
	if g.certs, err = newCertificates(&cfg); err != nil {
		return nil, err
	}
	g.life, g.endLife = context.WithCancel(context.Background())
	if g.verifier, err = newVerifier(g.life, &cfg, defaults); err != nil {
		g.endLife()
		return nil, err
	}
	g.oauth = newOAuthResource(&cfg)
	if g.verifier != nil {
		g.trusted = g.verifier.Trusted()
	}
	if g.audit, err = audit.Open(audit.Options{Path: cfg.AuditLog, MaxSizeMB: cfg.AuditLogMaxSize,
		MaxBackups: cfg.AuditLogMaxBackups, Node: g.nodeID, Logger: g.log}); err != nil {
		g.endLife()
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	if cfg.jwtOn() && (g.defaultCaps.CoversKind(wire.RequestKick) || g.defaultCaps.CoversKind(wire.KindGrant)) {
		// A JWT without a caps claim gets --default-capabilities: with
		// the open mode's "*", any token the identity provider signs may
		// kick and grant.
		g.log.Warn("JWTs without a caps claim get --default-capabilities, which allow gateway/kick or capability/grant: set --default-capabilities to what such a token should allow",
			"default_capabilities", cfg.DefaultCapabilities)
	}
	g.node = g.newNode()
	if g.verifier != nil {
		g.node.Verify = g.verify
	}
	g.metrics = newMetrics(g.node.Metrics, g.activeContexts, g.historyState, g.historyCache, g.historyAnswers, g.audit)
	g.metrics.registry.MustRegister(g.node.Traces.Dropped)
	ns, nc, reads, tempDir, err := startNATS(&g.cfg, g.nodeID)
	if err != nil {
		g.endLife()
		g.closeAudit()
		return nil, err
	}
	g.ns, g.nc, g.reads, g.tempDir = ns, nc, reads, tempDir
	g.node.Broker = pod.NewNATSBroker(nc)
	g.node.Start()
	stop := func() {
		g.endLife()
		g.closeAudit()
		g.node.Stop()
		nc.Close()
		closeAll(reads)
		if ns != nil {
			ns.Shutdown()
		}
		if tempDir != "" {
			_ = os.RemoveAll(tempDir)
		}
	}
	if err := g.openHistory(); err != nil {
		stop()
		return nil, err
	}
	if cfg.clustered() {
		c, err := startCluster(g)
		if err != nil {
			g.histStop()
			stop()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		g.cluster = c
		g.node.Cluster = c
	}
	g.mcp = g.newMCPEndpoint()
	g.node.OnServers = g.mcp.ServersChanged
	// Built here, not in Serve, so that a Shutdown that comes before or
	// during Serve stops it (Serve then returns at once).
	g.httpServer = &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: g.cfg.HandshakeTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	g.accepting.Store(true)
	go g.janitor()
	go g.watchTokens(g.life)
	go g.watchTLS(g.life)
	return g, nil
}

// openHistory opens the history stream (history on). Alone or with an
// external NATS it is made before the gateway serves, so that a NATS
// without JetStream stops it at start; in an embedded cluster it can only
// be made once enough nodes have joined, so it opens in the background
// and pods wait for it.
func (g *Gateway) openHistory() error {
	g.histReady = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	g.histStop = cancel
	if !g.cfg.historyOn() {
		return nil
	}
	g.node.HistoryOpen = g.histReady // no pod opens before
	cfg := history.Config{
		Subjects: []string{pod.StreamSubjects}, Entries: g.cfg.History, MaxAge: g.cfg.HistoryAge,
		MaxBytes: int64(g.cfg.HistoryBytes), MaxMsgSize: int32(g.cfg.MaxFrameBytes()),
		Replicas: historyReplicas(&g.cfg),
		// The embedded server keeps it in files (the temporary directory
		// without --history-dir) unless told to keep it in the Go heap; an
		// external deployment's memory is not the gateway's heap.
		File:      g.cfg.HistoryDir != "" || g.cfg.NATSURL == "" && g.cfg.HistoryStore == HistoryStoreFile,
		Temporary: g.cfg.HistoryDir == "" && g.cfg.NATSURL == "",
		// A node alone writes its own embedded stream, alone: the
		// writer's rounds are acknowledged once each.
		Own:        g.cfg.ownsHistory(),
		Reads:      g.reads,
		CacheBytes: g.cfg.historyCacheBytes(),
	}
	if g.cfg.clustered() {
		// Across a network a leader may die with what it was sent: the
		// writer notices, and names its messages so that it can send them
		// again without storing one twice.
		cfg.AckWait = history.AckWait
	}
	open := func(ctx context.Context) error {
		stream, err := history.Open(ctx, g.nc, cfg, g.nodeID)
		if err != nil {
			return err
		}
		g.hist = stream
		g.node.History = stream
		g.node.Writer = history.NewWriter(stream, history.WriterOptions{
			Node: g.nodeID, MaxBytes: min(g.cfg.MaxFrameBytes(), historyBatchBytes), Logger: g.log, IDs: g.cfg.clustered(),
			OnHold: func() { g.metrics.historyHolds.Inc() },
			OnLate: func(n int) { g.metrics.historyLate.Add(float64(n)) },
		})
		g.node.WatchQuorum(g.reach())
		close(g.histReady)
		if g.node.Ordering == pod.OrderStream {
			// The node reads the stream's past now, not at its first
			// pod's opening, which would wait for it (pod.Node.FollowNow).
			g.node.FollowNow(ctx)
		}
		return nil
	}
	if g.cfg.ClusterName == "" {
		wait := 10 * time.Second
		if g.cfg.NATSURL != "" {
			wait = 5 * time.Second // a deployment without JetStream answers nothing
		}
		octx, ocancel := context.WithTimeout(ctx, wait)
		defer ocancel()
		if err := open(octx); err != nil {
			if errors.Is(err, history.ErrNoJetStream) {
				return fmt.Errorf("%w: enable JetStream in the NATS deployment (nats-server -js), or run with --history 0", err)
			}
			return err
		}
		return nil
	}
	go func() {
		if err := open(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("history unavailable", "err", err)
		}
	}()
	return nil
}

// historyBatchBytes bounds one message of the history stream: a batch of
// a pod's frames (history.Writer).
const historyBatchBytes = 1 << 20

// store is the history stream, or nil while it is not open (or history
// is off).
func (g *Gateway) store() *history.Stream {
	select {
	case <-g.histReady:
		return g.hist // written before histReady was closed
	default:
		return nil
	}
}

// Handler serves /ws, POST /pods/NAME/envelopes, the MCP endpoint at
// /mcp, the operator's API under /admin/ (admin.go), /healthz, /livez,
// /metrics, the pod viewer at /, and with --oauth-issuer the protected
// resource metadata (oauth.go).
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	if g.oauth != nil {
		g.oauth.register(mux)
	}
	mux.HandleFunc("/ws", g.serveWS)
	mux.HandleFunc("/pods/{pod}/envelopes", g.servePublish)
	mux.Handle("/mcp", g.mcp)
	mux.HandleFunc("/admin/", g.serveAdmin)
	mux.HandleFunc("/healthz", g.serveHealth)
	mux.HandleFunc("/livez", serveLive)
	mux.Handle("/metrics", promhttp.HandlerFor(g.metrics.registry, promhttp.HandlerOpts{}))
	mux.Handle("/", viewerHandler())
	return mux
}

// enter counts a WebSocket handler in handlers, unless the gateway is
// shutting down. A WaitGroup's Add from zero must come before its Wait:
// under enterMu, every Add that enter makes comes before Shutdown turns
// accepting off, which comes before its Wait; after that none is made.
func (g *Gateway) enter() bool {
	g.enterMu.Lock()
	defer g.enterMu.Unlock()
	if !g.accepting.Load() {
		return false
	}
	g.handlers.Add(1)
	return true
}

// goAway closes r with 1001 once what is queued for it is written: the
// close a shutdown gives every participant (docs/protocol.md section 7).
func goAway(r *participant.Participant) {
	r.CloseAfterDrain(participant.StatusGoingAway, "gateway shutting down")
}

// ListenAndServe listens on the configured address and serves until
// Shutdown.
func (g *Gateway) ListenAndServe() error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return g.Serve(ln)
}

// Serve accepts connections on ln until Shutdown: over TLS alone when the
// gateway has a certificate (--tls-cert), ln being a plain TCP listener.
func (g *Gateway) Serve(ln net.Listener) error {
	g.listenerMu.Lock()
	g.listener = ln
	g.listenerMu.Unlock()
	g.announceTLS(ln.Addr())
	if conf := g.serverTLS(); conf != nil {
		ln = tls.NewListener(ln, conf)
	}
	err := g.httpServer.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Addr is the address Serve listens on.
func (g *Gateway) Addr() net.Addr {
	g.listenerMu.Lock()
	defer g.listenerMu.Unlock()
	if g.listener == nil {
		return nil
	}
	return g.listener.Addr()
}

func (g *Gateway) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if !g.accepting.Load() {
		http.Error(w, "shutting down\n", http.StatusServiceUnavailable)
		return
	}
	if g.store() == nil && g.cfg.historyOn() {
		// A cluster's nodes can serve pods once their JetStream has formed.
		http.Error(w, "waiting for the history stream (the cluster's JetStream is forming)\n", http.StatusServiceUnavailable)
		return
	}
	if g.node != nil && g.node.NoQuorum() {
		// Its pods take no envelope and no member: a load balancer
		// sends them to another node.
		http.Error(w, "no quorum: this node cannot reach a quorum of the cluster's history stream\n", http.StatusServiceUnavailable)
		return
	}
	if reading, next, from := g.node.ReadingPast(); reading {
		// A node started again opens no pod before it has read the
		// stream's past (pod.Node.ReadingPast): its clients would wait.
		msg := "reading the history stream's past: its follower is starting\n"
		if from > 0 {
			msg = fmt.Sprintf("reading the history stream's past: at sequence %d of %d\n", min(next, from), from-1)
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// serveLive answers 200 for as long as the process serves HTTP, also while
// it drains and while a cluster's JetStream forms, when /healthz says 503:
// it is for a liveness check (Kubernetes restarts a container whose
// liveness fails), which must not restart a node that waits for its peers
// or finishes its drain. /healthz is for the load balancer's readiness.
func serveLive(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok\n"))
}

// bucketKey names a participant's buckets: pod names and participant ids
// hold no "/".
func bucketKey(pod, id string) string { return pod + "/" + id }

func (g *Gateway) activeContexts() float64 {
	n := 0
	for _, p := range g.node.Pods() {
		a, _ := p.Registry.Counts()
		n += a
	}
	return float64(n)
}

// janitor runs the gateway's periodic work from one goroutine: every
// second it watches each connection's writer (write timeouts, idle
// writers) and ticks the node's pods (pod.Node.Tick: their history, and
// every ten seconds what waits in vain and the idle pods), every
// --ping-interval it pings every connection, and every ten seconds it
// forgets refilled buckets of departed participants.
func (g *Gateway) janitor() {
	defer close(g.janitorDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastPing, lastSweep := time.Now(), time.Now()
	for {
		select {
		case <-g.janitorStop:
			return
		case now := <-t.C:
			ping := g.cfg.PingInterval > 0 && now.Sub(lastPing) >= g.cfg.PingInterval
			if ping {
				lastPing = now
			}
			sweep := now.Sub(lastSweep) >= 10*time.Second
			if sweep {
				lastSweep = now
				g.node.Buckets.Sweep(now)
			}
			g.mcp.EndExpired(now)
			pods := g.node.Pods()
			for _, p := range pods {
				for _, r := range p.Members() {
					expire(p, r, now)
					r.Watch(now)
					if ping {
						r.Ping()
					}
				}
			}
			g.node.Tick(now, g.historyFirstSeq(len(pods) > 0 || g.node.Following()), sweep)
		}
	}
}

// historyState is what the history stream holds, for /metrics.
func (g *Gateway) historyState() (entries, bytes float64) {
	store := g.store()
	if store == nil {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	e, b, err := store.State(ctx)
	if err != nil {
		return 0, 0
	}
	return float64(e), float64(b)
}

// historyCache is what the node's cache of the history stream did, for
// /metrics (zero before the stream opens, and with history off).
func (g *Gateway) historyCache() history.CacheStats {
	if store := g.store(); store != nil {
		return store.CacheStats()
	}
	return history.CacheStats{}
}

// historyAnswers counts the history stream's answers out of the
// ordinary, for /metrics.
func (g *Gateway) historyAnswers() history.Answers {
	if store := g.store(); store != nil {
		return store.Answers()
	}
	return history.Answers{}
}

// historyFirstSeq is the oldest sequence the history stream holds, which
// the pods' indexes and the node's follower's sequences follow
// (--history-bytes discards the stream's oldest messages, of any pod),
// or 0 when there is nothing to ask (no stream, or neither a pod open
// nor a follower: need is false).
func (g *Gateway) historyFirstSeq(need bool) uint64 {
	store := g.store()
	if store == nil || !need {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	first, err := store.FirstSeq(ctx)
	if err != nil {
		return 0
	}
	return first
}

// Shutdown drains the node (drain: it stops accepting participants and
// envelopes, delivers what is queued, and closes every connection with
// 1001; connections still busy when ctx ends are dropped), unless an
// operator drained it before (POST /admin/drain). Then the listener
// closes and NATS stops.
func (g *Gateway) Shutdown(ctx context.Context) error {
	if !g.shutting.CompareAndSwap(false, true) {
		return nil
	}
	g.drain(ctx)
	g.endLife()
	done := make(chan struct{})
	go func() { g.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Every participant is gone: the listener may close. Requests still
	// in flight (a publish) get a moment to finish.
	hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
	if err := g.httpServer.Shutdown(hctx); err != nil {
		_ = g.httpServer.Close()
	}
	hcancel()
	close(g.janitorStop)
	<-g.janitorDone
	for _, p := range g.node.Pods() {
		p.Close()
	}
	if g.cluster != nil {
		g.cluster.close()
	}
	g.histStop()
	if w := g.node.Writer; w != nil {
		wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.Sync(wctx) // what the last joins and leaves added
		wcancel()
		w.Close()
	}
	if g.hist != nil {
		g.hist.Close()
	}
	g.node.Stop()
	_ = g.nc.Flush()
	g.nc.Close()
	closeAll(g.reads)
	if g.ns != nil {
		g.ns.Shutdown()
		g.ns.WaitForShutdown()
	}
	if g.tempDir != "" {
		_ = os.RemoveAll(g.tempDir)
	}
	g.closeAudit()
	return ctx.Err()
}

// closeAudit writes out the audit trail and closes it, giving up after
// auditCloseTimeout (a trail that blocks: the lines still queued are lost).
func (g *Gateway) closeAudit() {
	ctx, cancel := context.WithTimeout(context.Background(), auditCloseTimeout)
	defer cancel()
	if err := g.audit.Close(ctx); err != nil {
		g.log.Warn("the audit trail was not written out at shutdown", "err", err)
	}
}

// newNode is what the gateway's pods share: its limits as they are, the
// welcome's and the buckets derived from them.
func (g *Gateway) newNode() *pod.Node {
	c := &g.cfg
	n := &pod.Node{
		ID: g.nodeID,
		Config: pod.Config{
			Config: c.Config,
			// Half the history, shared by the nodes that write into it.
			FlightBytes: int64(c.HistoryBytes) / int64(2*clusterSize(c)),
		},
		Limits:  c.Welcome(),
		Log:     g.log,
		Metrics: pod.NewMetrics(),
		Audit:   g.audit,
		Buckets: c.NewBuckets(),
		Traces:  pod.NewTraces(g.tracer()),
	}
	n.Metrics.Pods.SetMaxPods(c.MetricsMaxPods)
	switch {
	case c.clustered() && c.historyOn():
		n.Ordering = pod.OrderStream
	case c.clustered():
		n.Ordering = pod.OrderCore
	default:
		n.Ordering = pod.OrderLocal
	}
	return n
}
