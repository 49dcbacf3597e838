// Package harness is what the integration tests share: one of each thing
// they need, written once.
//
//   - A gateway: StartGateway serves one in process on a loopback port
//     (Gateway.URL, Gateway.WS, its log in Gateway.Logs); StartGatewayProc
//     runs the mcpp-gateway binary as an operator does (GatewayProc:
//     Restart, WaitHealthy), built once by BuildCommand into the directory
//     Run makes and removes (TestMain calls Run). MCPP_TEST_HISTORY=0
//     runs every gateway a test starts with --history 0 (HistoryOff).
//   - A participant: Client, on the public client's Conn (package
//     github.com/mcpp/gateway/client), which dials as an agent does but
//     hands over the bytes: a Client keeps every WebSocket message as
//     received (Raw) and each envelope decoded into a Msg, so that a test
//     asserts on the exact bytes and sends what a well-behaved client
//     never would (SendRaw). Gateway.Dial joins and waits for the welcome;
//     Expect, ExpectKind, ExpectError, ExpectNothing and the others read.
//     A Peer is the same connection keeping raw bytes only (JSON numbers
//     beyond float64, a reader that keeps nothing). WebSocketConn speaks
//     coder/websocket itself, for the few inputs the public client refuses
//     to make: binary messages, MCPx's topic= join, an upgrade without a
//     pod (Refusal, DialWebSocket).
//   - Its metrics: MetricsOf, Metric and MetricOrZero read /metrics with
//     Prometheus's own text parser.
//   - The MCP endpoint through the official SDK's client (MCPConnect,
//     MCPCall…), and the viewer in a real headless Chromium (NewBrowser).
//
// Every helper fails the test it is given (or the one its Client was made
// in) with what a user would have seen, and cleans up with t.Cleanup.
package harness
