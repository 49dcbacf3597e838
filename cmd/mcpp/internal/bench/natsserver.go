package bench

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATSMain is the hidden `mcpp _nats --listen HOST:PORT` command that
// `mcpp bench --peer nats` starts, as it starts the relay: a nats-server,
// embedded with its default limits, whose only listener is WebSocket
// without TLS on HOST:PORT. It runs in a process of its own so that its CPU
// time and memory can be read from /proc apart from the clients', and so
// that its garbage collector and scheduler do not share a Go runtime with
// the load (the gateway and the relay get the same treatment).
func NATSMain(args []string) int {
	fs := flag.NewFlagSet("mcpp _nats", flag.ContinueOnError)
	listen := fs.String("listen", "", "HOST:PORT of the WebSocket listener (the port may not be 0)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	host, p, err := net.SplitHostPort(*listen)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port <= 0 {
		// Port 0 would disable nats-server's WebSocket listener.
		fmt.Fprintln(os.Stderr, "nats: --listen HOST:PORT with a port")
		return 2
	}
	ns, err := startNATS(host, port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats:", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	<-sigs
	ns.Shutdown()
	ns.WaitForShutdown()
	return 0
}

// startNATS starts nats-server, with its default limits, listening on
// WebSocket only.
func startNATS(host string, port int) (*natsserver.Server, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "mcpp-bench",
		// No client (TCP) port: bench speaks WebSocket only, like the
		// gateway's clients.
		DontListen: true,
		NoSigs:     true, // the signals are NATSMain's
		NoLog:      true,
		Websocket:  natsserver.WebsocketOpts{Host: host, Port: port, NoTLS: true},
	})
	if err != nil {
		return nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("not ready")
	}
	return ns, nil
}
