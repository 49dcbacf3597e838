package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/internal/filewatch"
)

// With --tls-cert and --tls-key the gateway serves HTTPS and WSS only, on
// the one listener: /ws, the publishes, /mcp and the viewer alike. The
// certificate is read again on SIGHUP (ReloadTLS) and when either file
// changes (watchTLS), so that it rotates without a restart: connections
// already open keep the session they made, new ones get the new
// certificate. A reload that fails keeps the certificate in force.

const (
	// minTLSVersion is the oldest TLS the gateway speaks: TLS 1.0 and
	// 1.1 are deprecated (RFC 8996), and every client of today speaks 1.2.
	minTLSVersion = tls.VersionTLS12
	// tlsWatchInterval is how often the certificate's files are looked at
	// (one stat each), as the token files are (tokens.DefaultWatchInterval).
	tlsWatchInterval = 2 * time.Second
)

// certificates is the certificate the gateway serves, as last loaded from
// --tls-cert and --tls-key.
type certificates struct {
	certFile, keyFile string
	current           atomic.Pointer[tls.Certificate]

	mu   sync.Mutex     // one load at a time
	seen filewatch.Seen // the two files as the last load saw them
}

// newCertificates loads the certificate of cfg, or returns nil when TLS is
// off. A certificate that does not load stops the gateway: the error names
// the flags.
func newCertificates(cfg *Config) (*certificates, error) {
	if cfg.TLSCert == "" {
		return nil, nil // Validate has checked that --tls-key is empty too
	}
	c := &certificates{certFile: cfg.TLSCert, keyFile: cfg.TLSKey}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads both files and, when they hold a certificate and its key,
// serves it from now on. Each file's stamp is taken before it is read, so
// that a change made while it is read is seen by the next look.
func (c *certificates) load() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen.Read(c.certFile)
	c.seen.Read(c.keyFile)
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert %s and --tls-key %s: %w", c.certFile, c.keyFile, err)
	}
	c.current.Store(&cert)
	return nil
}

// changed reports whether either file differs from what the last load saw.
func (c *certificates) changed() bool { return c.seen.Changed() }

// get is tls.Config.GetCertificate: the certificate in force when a
// handshake begins.
func (c *certificates) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.current.Load(), nil
}

// serverTLS is the TLS of the gateway's listener, or nil when TLS is off.
func (g *Gateway) serverTLS() *tls.Config {
	if g.certs == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:     minTLSVersion,
		GetCertificate: g.certs.get,
		// HTTP/1.1 alone: the WebSocket upgrade is an HTTP/1.1 request,
		// and the gateway's bounds on a connection's headers and
		// handshake are written for HTTP/1.1 connections.
		NextProtos: []string{"http/1.1"},
	}
}

// ReloadTLS reads --tls-cert and --tls-key again (mcpp-gateway calls it
// on SIGHUP): new connections get the certificate they now hold, the
// connections already open keep theirs. When they do not load, the
// certificate in force stays, and the error is logged and returned. It
// does nothing when TLS is off.
func (g *Gateway) ReloadTLS() error {
	if g.certs == nil {
		return nil
	}
	return g.reloadTLS("reloaded", triggerSignal)
}

// reloadTLS loads the certificate again and logs the outcome; why says
// what prompted it, trigger names it for the audit trail.
func (g *Gateway) reloadTLS(why, trigger string) error {
	before := g.certs.current.Load()
	err := g.certs.load()
	g.auditTLS(trigger, before, err)
	if err != nil {
		g.log.Error("the TLS certificate does not load; the previous one stays in force", "err", err)
		return err
	}
	g.log.Info("TLS certificate "+why, "cert", g.certs.certFile, "not_after", notAfter(g.certs.current.Load()))
	return nil
}

// notAfter is when cert expires, for the log ("" when it cannot be told).
func notAfter(cert *tls.Certificate) string {
	if cert == nil || cert.Leaf == nil {
		return ""
	}
	return cert.Leaf.NotAfter.UTC().Format(time.RFC3339)
}

// watchTLS reloads the certificate when either of its files changes (its
// size, its modification time, or which file its path names), until ctx
// ends.
func (g *Gateway) watchTLS(ctx context.Context) {
	if g.certs == nil {
		return
	}
	filewatch.Poll(ctx, tlsWatchInterval, g.certs.changed, func() {
		_ = g.reloadTLS("reloaded: its files changed", triggerChange)
	})
}

// announceTLS logs, once the gateway listens on addr, how it serves:
// the certificate it serves, or, when tokens are required and would travel
// in the clear to whoever can reach a listener that is not loopback, one
// warning.
func (g *Gateway) announceTLS(addr net.Addr) {
	if g.certs != nil {
		g.log.Info("serving HTTPS and WSS only", "addr", addr.String(), "cert", g.certs.certFile,
			"not_after", notAfter(g.certs.current.Load()), "min_version", "TLS 1.2")
	}
	if tokensInClear(addr, g.certs != nil, g.cfg.tokensRequired()) {
		g.log.Warn("tokens are required and travel in the clear: the gateway listens without TLS on an address that is not loopback; serve TLS (--tls-cert, --tls-key), or listen on loopback behind a proxy that does",
			"addr", addr.String())
	}
}

// tokensInClear reports whether tokens required by the gateway would
// travel unencrypted over a network: a plain listener (tlsOn false) on an
// address that is not loopback (the unspecified address, 0.0.0.0 or ::,
// is every interface, so not loopback).
func tokensInClear(addr net.Addr, tlsOn, tokensRequired bool) bool {
	if tlsOn || !tokensRequired || addr == nil {
		return false
	}
	return !loopbackAddr(addr)
}

// loopbackAddr reports whether addr is a loopback address (127.0.0.0/8,
// ::1, or a Unix socket, which never leaves the machine).
func loopbackAddr(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
