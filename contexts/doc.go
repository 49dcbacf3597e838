// Package contexts is a pod's context registry (docs/protocol.md section 3):
// which sub-contexts exist, their type, parent and depth fixed when the first
// envelope named them, how many envelopes and bytes each carried and who sent
// them, and when each concludes: by a conclusion-kind envelope, by falling
// idle for the timeout, or with its parent.
//
// The registry is the one place that decides an envelope's context rules:
// Accept applies them in the order of the table of docs/protocol.md section 5
// (conflict, cycle, depth, then caps and rates) and records the envelope only
// when every check passed. What it concluded comes back with everything the
// gateway's system/context events need, so the gateway never reads the
// registry again while it writes them.
//
// Timeouts cost O(1) per envelope: activity only moves a context's
// LastActivity, and one min-heap of deadlines per pod, looked at by one
// timer, concludes what has really fallen idle. Concluded contexts stay
// queryable for the retention, then are forgotten, so memory follows the
// contexts in use.
package contexts
