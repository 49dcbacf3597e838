// Command mcpp-gateway runs the MCPP pod gateway: participants join pods
// over WebSocket and every envelope one of them sends is relayed to the
// others through an embedded NATS server.
//
// Every setting is a flag and an MCPP_<FLAG> environment variable; the
// command line wins. SIGTERM or SIGINT stops it gracefully; SIGHUP reads
// the token files, the JWT keys and the TLS certificate again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/tracing"
)

func main() {
	// The gateway gives an id to every envelope sent without one: from a
	// pool of random bytes, not one read of the system's randomness each.
	// (Process-wide, so set here, before anything runs, as the library
	// asks.)
	uuid.EnableRandPool()
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg := gateway.DefaultConfig()
	fs := flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	profileListen := fs.String("profile-listen", "", "serve Go's profiles (net/http/pprof) on this address, e.g. 127.0.0.1:6060 (default: none)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mcpp-gateway [flags]\n\nThe MCPP pod gateway. Every flag can also be set as MCPP_<FLAG> (upper case, - as _).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := gateway.ApplyEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintln(os.Stderr, "mcpp-gateway:", err)
		return 2
	}
	if *version {
		fmt.Println("mcpp-gateway", gateway.Version(), runtime.Version())
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "mcpp-gateway: --log-level:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log

	// Traces: off unless the OTEL_* environment variables ask for them
	// (docs/protocol.md section 7, "Traces").
	traces, err := tracing.Start(context.Background(), "mcpp-gateway")
	if err != nil {
		log.Error("cannot start tracing", "err", err)
		return 2
	}
	if traces != nil {
		cfg.TracerProvider = traces.TracerProvider()
		log.Info("tracing on", "exporter", os.Getenv("OTEL_TRACES_EXPORTER"), "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		defer func() {
			// What is still buffered goes out before the process ends.
			ctx, cancel := context.WithTimeout(context.Background(), tracing.ShutdownTimeout)
			defer cancel()
			if err := traces.Shutdown(ctx); err != nil {
				log.Warn("the last spans were not exported", "err", err)
			}
		}()
	}

	g, err := gateway.New(cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	if *profileListen != "" {
		// On an address of its own, never the participants': profiles
		// are for the operator.
		pl, err := net.Listen("tcp", *profileListen)
		if err != nil {
			log.Error("cannot listen for profiles", "addr", *profileListen, "err", err)
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go func() { _ = http.Serve(pl, mux) }()
		log.Info("profiles", "url", "http://"+pl.Addr().String()+"/debug/pprof/")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("cannot listen", "addr", cfg.Listen, "err", err)
		return 1
	}
	scheme := "ws"
	if cfg.TLSCert != "" {
		scheme = "wss"
	}
	log.Info("mcpp-gateway listening", "addr", ln.Addr().String(), "ws", fmt.Sprintf("%s://%s/ws?pod=NAME", scheme, ln.Addr()),
		"auth", g.DescribeAuth())

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
wait:
	for {
		select {
		case err := <-served:
			if err != nil {
				log.Error("server stopped", "err", err)
				return 1
			}
			return 0
		case s := <-sigs:
			if s == syscall.SIGHUP {
				// Reload the token file and the JWT keys; whoever's token
				// is gone is disconnected (Reload logs the outcome). The
				// TLS certificate too: new connections get the one the
				// files now hold (ReloadTLS logs the outcome).
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = g.Reload(ctx)
				cancel()
				_ = g.ReloadTLS()
				continue
			}
			log.Info("shutting down", "signal", s.String(), "timeout", cfg.ShutdownTimeout.String())
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		log.Warn("shutdown timed out; remaining connections were dropped", "err", err)
	}
	log.Info("stopped")
	return 0
}
