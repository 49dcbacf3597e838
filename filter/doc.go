// Package filter holds a participant's filter (docs/protocol.md section 4):
// which envelopes of its pod it wants to receive.
//
// A Filter is parsed from the query of the WebSocket upgrade (FromQuery) or
// updated from a gateway/filter request (Filter.Update), and compiled once
// into sets. Filter.Admits runs for every recipient of every envelope, so it
// works on the frame header that ingress wrote (envelope.Meta) and costs a
// few map look-ups, whatever the number of entries in the filter, with no
// allocation.
package filter
