// Package limits keeps a pod safe from the participants in it: token
// buckets per participant, per context and for opening contexts (on
// golang.org/x/time/rate), with the retry delay each refusal reports.
// The context registry, which applies the caps on contexts, is package
// contexts.
//
// A refusal is always an *envelope.Error with the code of docs/protocol.md
// section 5 and, for rate limits, the delay the limiter itself computes, so
// that nothing is dropped without the sender being told why and when to try
// again.
package limits
