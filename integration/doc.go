// Package integration holds black-box tests of the gateway: a real gateway
// (in process, or the built mcpp-gateway binary where a test needs a
// process), its real embedded NATS server, and real WebSocket clients on
// loopback. Nothing in the path of an envelope is mocked. What the tests
// share (one gateway starter, one client, one metrics reader, one binary
// builder) is package internal/harness.
package integration
