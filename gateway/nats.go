package gateway

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// subjectPrefix starts every pod subject. A JetStream stream of all pods'
// history would capture "mcpp.pod.>".
const subjectPrefix = "mcpp.pod."

// PodSubject is the NATS subject of a pod. Pod names may hold dots, which
// separate NATS tokens, so they become "~", which pod names cannot hold.
func PodSubject(pod string) string {
	return subjectPrefix + strings.ReplaceAll(pod, ".", "~")
}

// maxFrameBytes bounds a frame: an accepted envelope (with the fields the
// gateway fills) and its header, which can hold a "to" list as long as the
// envelope, and the context's ancestry.
func maxFrameBytes(cfg *Config) int { return 2*cfg.MaxMessageBytes + 64<<10 }

// startNATS starts the embedded NATS server, joined to its cluster when
// one is configured, and connects to it in process; with --nats-url it
// connects to the external deployment instead and embeds nothing.
func startNATS(cfg *Config, nodeID string) (*server.Server, *nats.Conn, error) {
	connectOpts := []nats.Option{
		nats.Name("mcpp-gateway " + nodeID),
		nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.ReconnectBufSize(64 << 20),
	}
	if cfg.NATSURL != "" {
		nc, err := nats.Connect(cfg.NATSURL, connectOpts...)
		if err != nil {
			return nil, nil, fmt.Errorf("NATS %s: %w", cfg.NATSURL, err)
		}
		// An accepted envelope must never fail to publish: refuse to start
		// rather than lose envelopes the deployment cannot carry.
		if need := maxFrameBytes(cfg); nc.MaxPayload() < int64(need) {
			nc.Close()
			return nil, nil, fmt.Errorf("NATS %s carries messages of at most %d bytes; --max-message-bytes %d needs %d (twice the limit plus 64 KiB): raise max_payload in the NATS server or lower --max-message-bytes",
				cfg.NATSURL, nc.MaxPayload(), cfg.MaxMessageBytes, need)
		}
		return nil, nc, nil
	}
	opts := &server.Options{
		ServerName: "mcpp-" + nodeID,
		Host:       "127.0.0.1",
		Port:       cfg.NATSPort,
		DontListen: cfg.NATSPort == 0,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: int32(maxFrameBytes(cfg)),
		// The gateway's own client reads as fast as the server writes:
		// its subscriptions have no pending limit and their callbacks
		// never block, so the server must not cut it as slow.
		MaxPending:    1 << 30,
		WriteDeadline: 30 * time.Second,
	}
	if cfg.ClusterName != "" {
		host, port, err := net.SplitHostPort(cfg.ClusterListen)
		if err != nil {
			return nil, nil, fmt.Errorf("--cluster-listen: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, nil, fmt.Errorf("--cluster-listen: bad port %q", port)
		}
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: host, Port: p, ConnectRetries: 10}
		if opts.DontListen {
			// The server's routing waits on its client listener: give it
			// one on a random loopback port, which nobody is told of.
			opts.DontListen, opts.Port = false, server.RANDOM_PORT
		}
		if cfg.Routes != "" {
			opts.Routes = server.RoutesFromStr(cfg.Routes)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, nil, fmt.Errorf("embedded NATS: not ready after 10s")
	}
	nc, err := nats.Connect("", append(connectOpts, nats.InProcessServer(ns))...)
	if err != nil {
		ns.Shutdown()
		return nil, nil, fmt.Errorf("embedded NATS: connect: %w", err)
	}
	return ns, nc, nil
}
