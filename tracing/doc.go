// Package tracing is the gateway's (and mcpp bridge's) OpenTelemetry
// tracing: off unless the standard environment variables ask for it
// (Start), and the names of its spans and attributes, after
// OpenTelemetry's semantic conventions for messaging (a pod is a
// destination, an envelope a message) and for MCP (docs/protocol.md
// section 7, "Traces").
//
// The trace context itself travels in each envelope's trace field
// (docs/protocol.md section 1), which package envelope reads and fills;
// this package turns it into OpenTelemetry's span contexts and back.
package tracing
