package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsReadyWait is how long the gateway waits for its embedded NATS
// server to listen before it gives up.
const natsReadyWait = 30 * time.Second

// natsReady waits for ns to listen: at most natsReadyWait (a loaded
// machine may take a while to start JetStream's cluster), less when the
// server reports that it cannot (fatal).
func natsReady(ns *server.Server, fatal <-chan string) error {
	deadline := time.Now().Add(natsReadyWait)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return fmt.Errorf("embedded NATS: %s", msg)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("embedded NATS: not ready after %v", natsReadyWait)
		}
	}
	return nil
}

// startNATS starts the embedded NATS server, joined to its cluster when
// one is configured, and connects to it in process; with --nats-url it
// connects to the external deployment instead and embeds nothing.
// jetStreamSlack is the memory or disk JetStream may use beyond the
// history's bytes: markers, consumers' state, the stream's own indexes.
const jetStreamSlack = 64 << 20

// storeDir is where the embedded JetStream keeps its state: --history-dir,
// or a directory of the process's own (a memory stream still needs one for
// a cluster's metadata), which it removes when it stops.
func storeDir(cfg *Config) (dir string, temporary bool, err error) {
	if cfg.HistoryDir != "" {
		if err := os.MkdirAll(cfg.HistoryDir, 0o700); err != nil {
			return "", false, fmt.Errorf("--history-dir: %w", err)
		}
		return cfg.HistoryDir, false, nil
	}
	dir, err = os.MkdirTemp("", "mcpp-jetstream-")
	return dir, true, err
}

// serverName is the embedded server's name. A cluster's JetStream knows its
// peers by name, so with --history-dir the name is kept in the directory
// and a restarted node is the same peer.
func serverName(cfg *Config, nodeID string) (string, error) {
	if cfg.HistoryDir == "" {
		return "mcpp-" + nodeID, nil
	}
	path := filepath.Join(cfg.HistoryDir, "server-name")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, os.ErrNotExist) && err != nil {
		return "", fmt.Errorf("--history-dir: %w", err)
	}
	name := "mcpp-" + uuid.NewString()[:8]
	if err := os.WriteFile(path, []byte(name+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("--history-dir: %w", err)
	}
	return name, nil
}

// clusterSize counts the nodes of the embedded cluster from --routes (a
// node may list itself or not).
func clusterSize(cfg *Config) int {
	if cfg.ClusterName == "" {
		return 1
	}
	n, self := 0, false
	for _, r := range server.RoutesFromStr(cfg.Routes) {
		n++
		if r.Host == cfg.ClusterListen || r.Host == cfg.ClusterAdvertise {
			self = true
		}
	}
	if !self {
		n++
	}
	return n
}

// historyReplicas is --history-replicas, or when 0: 1 alone or with an
// external NATS (whose operators choose), and 3 (or fewer nodes) in an
// embedded cluster, so that the history, and the pods' delivery that
// follows it, outlive one node.
func historyReplicas(cfg *Config) int {
	if cfg.HistoryReplicas > 0 {
		return cfg.HistoryReplicas
	}
	return min(3, clusterSize(cfg))
}

// With history on, the embedded server runs JetStream in tempDir (when it
// is not --history-dir), which the caller removes when it stops.
//
// reads are more connections, for the history's reads
// (history.Config.Reads): a NATS server answers a direct get on the
// reading connection's own goroutine, so that a node reading much
// history (pods opened in a storm, many replays) on its one connection
// held up its writer's acknowledgements, its follower and its heartbeats
// behind the reads: the writer held, and the node refused envelopes for
// minutes (issue 38's full-size fault run). And on one reading
// connection every read waits for the ones before it, whose blocks a
// store that has just started loads from disk: readConns of them answer
// side by side.
func startNATS(cfg *Config, nodeID string) (ns *server.Server, nc *nats.Conn, reads []*nats.Conn, tempDir string, err error) {
	ns, nc, tempDir, err = startNATSConn(cfg, nodeID)
	if err != nil {
		return ns, nil, nil, tempDir, err
	}
	opts := []nats.Option{nats.Name("mcpp-gateway " + nodeID + " history reads"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	for range readConns {
		var r *nats.Conn
		if ns != nil {
			r, err = nats.Connect("", append(opts, nats.InProcessServer(ns))...)
		} else {
			r, err = nats.Connect(cfg.NATSURL, opts...)
		}
		if err != nil {
			closeAll(reads)
			nc.Close()
			if ns != nil {
				ns.Shutdown()
			}
			return nil, nil, nil, tempDir, fmt.Errorf("NATS: the history's reading connection: %w", err)
		}
		reads = append(reads, r)
	}
	return ns, nc, reads, tempDir, nil
}

// readConns is how many connections a node reads its history on.
const readConns = 4

// closeAll closes the connections.
func closeAll(conns []*nats.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// startNATSConn starts the embedded server (unless --nats-url) and the
// node's connection to it.
func startNATSConn(cfg *Config, nodeID string) (ns *server.Server, nc *nats.Conn, tempDir string, err error) {
	connectOpts := []nats.Option{
		nats.Name("mcpp-gateway " + nodeID),
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.ReconnectBufSize(64 << 20),
	}
	if cfg.NATSURL != "" {
		nc, err := nats.Connect(cfg.NATSURL, connectOpts...)
		if err != nil {
			return nil, nil, "", fmt.Errorf("NATS %s: %w", cfg.NATSURL, err)
		}
		// An accepted envelope must never fail to publish: refuse to start
		// rather than lose envelopes the deployment cannot carry.
		if need := cfg.MaxFrameBytes(); nc.MaxPayload() < int64(need) {
			nc.Close()
			return nil, nil, "", fmt.Errorf("NATS %s carries messages of at most %d bytes; --max-message-bytes %d needs %d (twice the limit plus 64 KiB): raise max_payload in the NATS server or lower --max-message-bytes",
				cfg.NATSURL, nc.MaxPayload(), cfg.MaxMessageBytes, need)
		}
		return nil, nc, "", nil
	}
	opts := &server.Options{
		ServerName: "mcpp-" + nodeID,
		Host:       "127.0.0.1",
		Port:       cfg.NATSPort,
		DontListen: cfg.NATSPort == 0,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: int32(cfg.MaxFrameBytes()),
		// The gateway's own client reads as fast as the server writes:
		// its subscriptions have no pending limit and their callbacks
		// never block, so the server must not cut it as slow.
		MaxPending:    1 << 30,
		WriteDeadline: 30 * time.Second,
	}
	defer func() {
		if err != nil && tempDir != "" {
			_ = os.RemoveAll(tempDir)
			tempDir = ""
		}
	}()
	if cfg.historyOn() {
		dir, temporary, err := storeDir(cfg)
		if err != nil {
			return nil, nil, "", err
		}
		if temporary {
			tempDir = dir
		}
		if opts.ServerName, err = serverName(cfg, nodeID); err != nil {
			return nil, nil, tempDir, err
		}
		opts.JetStream, opts.StoreDir = true, dir
		opts.JetStreamMaxMemory = int64(cfg.HistoryBytes) + jetStreamSlack
		opts.JetStreamMaxStore = int64(cfg.HistoryBytes) + jetStreamSlack
	}
	if cfg.ClusterName != "" {
		host, port, err := net.SplitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, nil, tempDir, fmt.Errorf("--cluster-listen: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, nil, tempDir, fmt.Errorf("--cluster-listen: bad port %q", port)
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: p, ConnectRetries: 10, Advertise: cfg.ClusterAdvertise}
		if opts.DontListen {
			// The server's routing waits on its client listener: give it
			// one on a random loopback port, which nobody is told of.
			opts.DontListen, opts.Port = false, server.RANDOM_PORT
		}
		if cfg.Routes != "" {
			opts.Routes = server.RoutesFromStr(cfg.Routes)
		}
	}
	ns, err = server.NewServer(opts)
	if err != nil {
		return nil, nil, tempDir, fmt.Errorf("embedded NATS: %w", err)
	}
	logger := newNATSLogger(cfg.logger())
	ns.SetLoggerV2(logger, false, false, false)
	go ns.Start()
	if err := natsReady(ns, logger.fatal); err != nil {
		ns.Shutdown()
		return nil, nil, tempDir, err
	}
	nc, err = nats.Connect("", append(connectOpts, nats.InProcessServer(ns))...)
	if err != nil {
		ns.Shutdown()
		return nil, nil, tempDir, fmt.Errorf("embedded NATS: connect: %w", err)
	}
	return ns, nc, tempDir, nil
}

// reach is, in an embedded cluster, how many of the other nodes the
// embedded server has routes to, and how many a quorum of the cluster
// needs besides this node (a majority with it): the node's quorum watch
// (pod.Node.WatchQuorum) takes a node short of them for cut off. nil
// without an embedded cluster.
func (g *Gateway) reach() func() (reached, needed int) {
	if g.ns == nil || g.cfg.ClusterName == "" {
		return nil
	}
	needed := clusterSize(&g.cfg) / 2
	return func() (int, int) {
		rz, err := g.ns.Routez(&server.RoutezOptions{})
		if err != nil {
			return 0, needed
		}
		peers := map[string]bool{}
		for _, r := range rz.Routes {
			peers[r.RemoteID] = true
		}
		return len(peers), needed
	}
}
