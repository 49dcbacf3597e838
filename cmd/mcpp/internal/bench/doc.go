// Package bench is `mcpp bench`: it measures how fast a gateway fans
// envelopes out from P publishers to N subscribers, and what it costs.
//
// A run is flat out with a bounded window of envelopes in flight, or at a
// fixed rate. Each envelope carries its send time, so every subscriber
// measures end-to-end latency. When bench starts the servers itself it also
// reads their CPU time from /proc, and with --baseline it alternates the
// gateway with the bare relay of package relay (A B A B …), so that each
// figure is quoted as a ratio against a baseline measured in the same run on
// the same noisy machine. With --peer nats a third server joins every
// round: nats-server with its WebSocket listener (the hidden `mcpp _nats`),
// driven by the same load over nats.go's WebSocket transport, so that the
// gateway is also quoted against a mature broker doing the same fan-out.
//
// --pods (pods.go) holds many small pods instead, as a gateway serving
// agents does: the same run, its joins, senders and counting, drives the
// gateway through package client (podsgateway.go) or nats-server through
// nats.go (podsnats.go), one server at a time, each a fresh process for
// each run (podsbench.go), so that the gateway, the gateway with other
// flags (--versus, e.g. --history 0) and NATS are measured by one command.
// What stalls deliveries at that size is the servers' garbage collectors,
// so each Go server runs with GODEBUG=gctrace=1 and its collections in the
// window are read from its stderr (gctrace.go), while the bench client's
// own collector is off for the window (clientgc.go) so that its pauses are
// not counted as the server's. podsreport.go prints each run, the servers
// side by side, or the same as JSON. Past what one source address's
// ephemeral ports hold, connections come from several loopback addresses
// (sourceaddr.go).
//
// bench needs no Go toolchain when it runs: nats-server is compiled into
// mcpp, and the gateway is a binary it is given or finds.
package bench
