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
package bench
