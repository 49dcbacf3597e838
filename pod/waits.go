package pod

import "slices"

// Waits of this node's own callers (docs/protocol.md sections 9 and 11):
// an MCP host's tool call awaits its answer, a host's call that became a
// proposal awaits its outcome (then the answer to the call its approval
// released), and the gateway's own requests (Ask) await their answers.
// A wait is keyed by the id it awaits and by who waits: the answer to a
// call is handed to waits of its requester alone, a proposal's outcome to
// waits of its proposer alone, however many others wait on the id.

// waiter is one wait.
type waiter struct {
	who string      // the requester or proposer it waits as
	ch  chan []byte // what it is handed, each once: bodies of envelopes
}

// waits are this node's waits, by the id awaited. Call its methods with
// Pod.mu held.
type waits map[string][]*waiter

// take ends the waits on id of who, and returns them.
func (w waits) take(id, who string) []*waiter {
	var out []*waiter
	keep := slices.DeleteFunc(w[id], func(x *waiter) bool {
		if x.who == who {
			out = append(out, x)
			return true
		}
		return false
	})
	if len(keep) == 0 {
		delete(w, id)
	} else {
		w[id] = keep
	}
	return out
}

// hand gives a copy of body to the waits on id of who, and ends them; it
// returns them, so that a proposal's may wait on for its call's answer.
func (w waits) hand(id, who string, body []byte) []*waiter {
	out := w.take(id, who)
	for _, x := range out {
		select {
		case x.ch <- slices.Clone(body):
		default: // handed what it can hold already; it gave up
		}
	}
	return out
}

// tell gives a copy of body to the waits on id of who, which go on
// waiting: a question asked, or progress, of the call they wait on.
func (w waits) tell(id, who string, body []byte) {
	for _, x := range w[id] {
		if x.who == who {
			select {
			case x.ch <- slices.Clone(body):
			default: // its buffer is full: a question the gateway answers for it by timeout, progress lost
			}
		}
	}
}

// waitBuffer is how many envelopes a wait holds that its waiter has not
// taken yet: an answer (or an outcome, then an answer), and the questions
// and progress of the call meanwhile.
const waitBuffer = 32

// Await waits for what answers id, as who: the body of the mcp/response to
// the request id that who sent (its recipient's answer, or the gateway's
// for it), or, for a proposal id that who made, the body of the
// system/proposal event that ends it and, when it was approved, then the
// body of the answer to the call released for it (a fulfilment's answer
// goes to its fulfiller, MEW's way). Before the answer, the channel also
// receives what the call's recipient sends who about the call (aboutCall):
// its questions (mcp/request) and its progress (mcp/notification).
// Register before handing the pod the request or proposal (Handle), then
// wait on the channel; Forget it when giving up.
func (p *Pod) Await(id, who string) <-chan []byte {
	x := &waiter{who: who, ch: make(chan []byte, waitBuffer)}
	p.mu.Lock()
	p.calls.waiters[id] = append(p.calls.waiters[id], x)
	p.mu.Unlock()
	return x.ch
}

// Forget ends a wait (Await) on id that will not be waited on; an id it
// does not wait on is ignored.
func (p *Pod) Forget(id string, ch <-chan []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls.waiters.forget(id, ch)
}

// forget ends the wait on id whose channel is ch. Call it with Pod.mu
// held.
func (w waits) forget(id string, ch <-chan []byte) {
	keep := slices.DeleteFunc(w[id], func(x *waiter) bool { return x.ch == ch })
	if len(keep) == 0 {
		delete(w, id)
	} else {
		w[id] = keep
	}
}
