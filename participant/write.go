package participant

import (
	"sync"
	"time"
)

// Writing (docs/protocol.md section 4's delivery): what is queued for the
// participant goes out in as few writes as it can, a batch of up to
// maxBatchItems messages or maxBatchBytes in one system call, by whichever
// goroutine finds the writer's role free (writeNow), or by the writer
// goroutine the caller wakes (Flush); a participant whose queue is full,
// in messages or bytes, is cut as a slow consumer.

// Write limits: one write (and so one batched message) holds at most
// maxBatchItems messages and maxBatchBytes (or one message larger than
// that), so that one participant's backlog goes out in a few large writes,
// not one huge one.
const (
	maxBatchItems = 256
	// 64 KiB per write amortizes the system call over 256 small
	// envelopes or 16 of 4 KiB, and keeps the pooled buffers reusable.
	maxBatchBytes = 64 << 10
)

// Queued is the number of messages waiting to be written, and their bytes.
func (p *Participant) Queued() (n, bytes int) { return p.queue.Size() }

// Enqueue queues body, an envelope of the pod, which the caller must never
// change afterwards (it is shared with every other recipient and written
// as it is, framed by the writer). When the queue is full the participant
// is cut with 4008 and Enqueue reports false; once the participant is
// closing it takes no more.
//
// Enqueue does not wake the writer: the pod's fan-out queues a burst of
// envelopes for each participant and then calls Flush once for each, so
// that the burst goes out in one write per connection. Until then a
// writer woken by an earlier flush waits for this one rather than write
// part of the burst: the way nats-server's writer waits while producers
// that queued for it are about to flush, so that a busy pod's envelopes
// go out in fewer, larger writes; nothing waits on a timer.
func (p *Participant) Enqueue(body []byte) bool {
	if !p.push(body, false) {
		return false
	}
	p.flushDue.Store(true)
	return true
}

// Flush wakes the writer for what Enqueue queued.
func (p *Participant) Flush() {
	p.flushDue.Store(false)
	p.wakeWriter()
}

// Answer queues body, a message of the gateway to this participant alone
// (its welcome, an error, the answer to a request), and wakes the writer:
// like Enqueue and Flush, but also while the participant is closing, until
// its close frame is written, so that what it sent in the meantime is
// still answered. As with Enqueue, body is written as it is: never change
// it afterwards.
func (p *Participant) Answer(body []byte) bool {
	if !p.push(body, true) {
		return false
	}
	p.wakeWriter()
	return true
}

func (p *Participant) push(frame []byte, answer bool) bool {
	if p.cut.Load() {
		return false
	}
	if p.queue.Push(frame, answer) {
		return true
	}
	if p.cut.Load() || p.drain.Load() != nil {
		return false
	}
	p.cutFor(CutSlowConsumer)
	p.Close(StatusSlowConsumer, "slow consumer: send queue full")
	return false
}

// cutFor reports a cut once.
func (p *Participant) cutFor(reason string) {
	if p.opts.OnCut != nil && p.reported.CompareAndSwap(false, true) {
		p.opts.OnCut(reason)
	}
}

// wakeWriter tells the writer there is something to write. When none is
// at work, the caller becomes it and writes what is queued itself, at
// once (writeNow): a connection that takes what it is sent holds no
// writer goroutine, and a delivery waits for no goroutine to be woken.
// The writer goroutine starts only for what writeNow leaves to it: what
// the socket did not take at once, a joiner's replay, a drain.
func (p *Participant) wakeWriter() {
	if !p.started.Load() {
		return // Start wakes it
	}
	if p.writerOn.Load() || !p.writerOn.CompareAndSwap(false, true) {
		p.queue.signal() // the writer at work takes it
		return
	}
	if !p.writeNow() {
		go p.writeLoop()
	}
}

// writeNow writes what is queued from the caller's goroutine, with the
// writer's role (writerOn) and without ever waiting: not on the socket,
// whose rest the writer goroutine writes, and not on a write of the
// library's under way. It reports false when the writer goroutine must
// take over (writerOn still held), true when it let the role go.
func (p *Participant) writeNow() bool {
	c := p.nc
	if p.source != nil || p.drain.Load() != nil || c == nil || c.wraw == nil || !c.wmu.TryLock() {
		return false
	}
	if c.rest != nil {
		c.wmu.Unlock()
		return false
	}
	// Up to 8 messages are popped onto the stack; a burst of more into a
	// pooled list, which holds them all (maxBatchItems): popping them
	// into one that grows would allocate for each burst.
	var small [8][]byte
	dst := small[:0]
	var list *[][]byte
	if n, _ := p.queue.Size(); n > len(small) {
		list = popLists.Get().(*[][]byte)
		dst = (*list)[:0]
	}
	items := p.queue.PopUpTo(dst, maxBatchItems, maxBatchBytes)
	if list != nil {
		defer putPopList(list)
	}
	if len(items) > 0 && !p.cut.Load() {
		msgs, bp := p.frame(items, p.filter.Load().Batch)
		clear(items)
		p.writes.Add(1)
		ok, err := c.tryWriteLocked(bp)
		c.wmu.Unlock()
		if err != nil {
			p.Kill()
			p.writerOn.Store(false)
			return true
		}
		if p.opts.OnWrite != nil {
			p.opts.OnWrite(msgs)
		}
		if !ok {
			return false // the socket is full: the writer goroutine waits on it
		}
	} else {
		c.wmu.Unlock()
	}
	p.writerOn.Store(false)
	// What was queued once the queue was popped, or a drain begun, by one
	// who saw the role taken is still this writer's to do: the writer
	// goroutine writes it, or sends the drain's close frame.
	if (p.queue.Len() > 0 || p.drain.Load() != nil) && !p.cut.Load() && p.writerOn.CompareAndSwap(false, true) {
		return false
	}
	return true
}

// Source feeds the writer ahead of the queue: a joiner's welcome and its
// replay of the pod's history, read as the connection takes them so that a
// long replay never sits in memory whole. What is delivered meanwhile
// queues behind it.
type Source interface {
	// Next appends to dst at most max messages of at most maxBytes in all
	// (at least one while any is left) and returns it; nothing appended
	// means the source is done. An error ends the connection, with the
	// error's text as the close reason.
	Next(dst [][]byte, max, maxBytes int) ([][]byte, error)
}

// Start lets the writer send what src gives (when not nil), then what is
// queued and what comes. Until then deliveries only queue: the pod makes
// the participant a member and only then starts it, so that nothing
// accepted after the participant has read its welcome can miss it.
func (p *Participant) Start(src Source) {
	p.source = src
	p.started.Store(true)
	p.wakeWriter()
}

// popLists hold the messages one write pops from the queue: at most
// maxBatchItems, so that popping into one never grows it.
var popLists = sync.Pool{New: func() any { l := make([][]byte, 0, maxBatchItems); return &l }}

// putPopList gives a list back, holding no message.
func putPopList(list *[][]byte) {
	clear((*list)[:cap(*list)])
	popLists.Put(list)
}

func (p *Participant) writeLoop() {
	list := popLists.Get().(*[][]byte)
	defer putPopList(list)
	items := *list
	for {
		if err := p.writeRest(); err != nil {
			p.Kill()
			return
		}
		for !p.cut.Load() {
			if p.source != nil {
				var err error
				items, err = p.source.Next(items[:0], maxBatchItems, maxBatchBytes)
				if err != nil {
					p.Close(StatusInternalError, closeReason(err.Error()))
					return
				}
				if len(items) == 0 {
					p.source = nil
				}
			}
			if p.source == nil {
				if p.flushDue.Load() && p.drain.Load() == nil {
					if n, bytes := p.queue.Size(); n < maxBatchItems && bytes < maxBatchBytes {
						break // the burst under way flushes again at its end
					}
				}
				items = p.queue.PopUpTo(items[:0], maxBatchItems, maxBatchBytes)
			}
			if len(items) == 0 {
				break
			}
			msgs, err := p.write(items, p.filter.Load().Batch)
			if err != nil {
				p.Kill()
				return
			}
			if p.opts.OnWrite != nil {
				p.opts.OnWrite(msgs)
			}
			clear(items)
		}
		if cf := p.drain.Load(); cf != nil && p.queue.Len() == 0 && !p.cut.Swap(true) {
			p.closeHandshake(cf.code, cf.reason)
			p.finish()
			return
		}
		select {
		case <-p.queue.ready:
		case <-p.done:
			return
		case <-p.park:
			// Idle since the last Watch: let the goroutine go, unless
			// something was queued meanwhile.
			p.queue.compact()
			p.writerOn.Store(false)
			if p.queue.Len() == 0 && p.drain.Load() == nil || !p.writerOn.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

// write sends the queued bodies, each as a text frame, in one Write:
// what queued up while the previous write was on its way goes out
// together, with no timer and so no added latency. With batch (and more
// than one) it sends them as one message instead, a line each. It reports how
// many WebSocket messages it wrote. There is no per-write timer: Watch
// cuts a write that outlasts WriteTimeout.
func (p *Participant) write(frames [][]byte, batch bool) (int, error) {
	msgs, bp := p.frame(frames, batch)
	p.writeStart.Store(time.Now().UnixNano())
	p.writes.Add(1)
	_, err := p.nc.Write(*bp)
	p.writeStart.Store(0)
	putWriteBuffer(bp)
	return msgs, err
}

// writeRest writes what writeNow left, the write timeout running.
func (p *Participant) writeRest() error {
	p.writeStart.Store(time.Now().UnixNano())
	err := p.nc.writeRest()
	p.writeStart.Store(0)
	return err
}

// frame puts the queued bodies into one buffer of writeBuffers as the
// text frames write sends (one for all of them with batch, their lines
// joined by newlines), and says how many WebSocket messages that is.
func (p *Participant) frame(bodies [][]byte, batch bool) (int, *[]byte) {
	bp := writeBuffers.Get().(*[]byte)
	buf := (*bp)[:0]
	msgs := len(bodies)
	if batch && len(bodies) > 1 {
		n := len(bodies) - 1
		for _, b := range bodies {
			n += len(b)
		}
		buf = AppendTextHeader(buf, n)
		for i, b := range bodies {
			if i > 0 {
				buf = append(buf, '\n')
			}
			buf = append(buf, b...)
		}
		msgs = 1
	} else {
		for _, b := range bodies {
			buf = append(AppendTextHeader(buf, len(b)), b...)
		}
	}
	*bp = buf
	return msgs, bp
}
