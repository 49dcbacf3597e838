// Package limits keeps a pod safe from the participants in it: every
// limit of the gateway in one Config (config.go), and token buckets per
// participant, per context and for opening contexts (rate.go, on
// golang.org/x/time/rate), with the retry delay each refusal reports.
// The context registry, which applies the caps on contexts, is package
// contexts.
//
// Config is the one shape of a limit: the gateway's flags fill it
// (gateway.Config embeds it), pod.Config embeds it and contexts.Config
// its Contexts part, and what derives from it is derived in one function
// each: the welcome's limits (Config.Welcome, wire.Limits) and the
// participants' buckets (Config.NewBuckets).
//
// A refusal is always an *envelope.Error with the code of docs/protocol.md
// section 5 and, for rate limits, the delay the limiter itself computes, so
// that nothing is dropped without the sender being told why and when to try
// again.
package limits
