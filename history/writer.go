package history

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Writer writes the frames of every pod into the history stream, in the
// order they are appended, from one goroutine: the pods hand it what
// they accept and go on at once (their members already have it), and the
// stream's acknowledgement tells each pod's Index where its entries are.
//
// What is appended while the previous messages are on their way is packed
// into one message per pod subject (a batch, batch.go), so that a busy
// gateway costs the stream one message per burst of a pod, not one per
// envelope. A pod has two subjects, its entries' and its live frames'
// markers' (AppendMarker); a batch holds what was appended in a row to
// one of them, so that the stream holds the pod's frames in the order
// they were appended, which is the order every node delivers them in.
// Across a network every message carries an id (Nats-Msg-Id,
// WriterOptions.IDs), so that one sent again after its acknowledgement
// was lost is stored once.
//
// On a node's own stream (Config.Own, round.go) the writer sends rounds:
// every roundEvery at most, one at a time, all it has packed since, with
// one acknowledgement for the round; and where the history does not
// outlive the process, a pod's batch stays open for podLinger, taking the
// pod's frames of that second. Both spare the stream (NATS's connection,
// JetStream's store, the collector) the cost of a message and an answer
// per envelope (issue 39); neither delays delivery, which a node alone
// makes at once. Sync and WaitFor send what they wait for in the next
// round. Rounds are for a stream without IDs only; with IDs a pod has one
// batch on its way at a time instead (holdBack).
//
// When the stream stops acknowledging (its leader died; an election takes
// seconds), the writer holds: it sends nothing new, waits until the stream
// answers, then sends again, in order, every message not acknowledged.
// Nothing appended is lost; a message that was stored after all is not
// stored twice; one that was not is stored after later ones that were
// (late, never lost).
type Writer struct {
	b      Backend
	log    *slog.Logger
	opts   WriterOptions
	prefix string // of the messages' ids
	// rounds is set when b takes a round of messages at once (round.go):
	// the writer then keeps one round on its way, sends one at most every
	// roundEvery, and lets each pod's batch take frames for linger.
	rounds roundBackend
	linger time.Duration
	// lastRound is when the last round was sent, and tick the writer's
	// wake for the next (the writer's goroutine's).
	lastRound time.Time
	tick      *time.Timer

	mu        sync.Mutex
	queue     []item            // appended, not sent yet
	spare     []item            // the queue's previous array, reused
	sent      []*batch          // sent, not settled yet, oldest first
	free      []*batch          // settled and out of sent: reused by pack
	bytes     int64             // of the frames queued and sent, not settled
	appended  uint64            // items appended, numbered from 1
	batches   uint64            // batches made: their ordinals, and their ids
	open      map[string]*batch // each pod's batch that takes its next frames, by item.order
	ready     []*batch          // no longer open, not sent: they go in the next round
	lingering []lingerRef       // the open batches, in the order made, from lhead on (due)
	lhead     int
	urgent    uint64            // the items up to it are waited for (WaitFor): sent at once
	flying    map[string]int    // batches made and not settled, by item.order (with IDs: holdBack)
	waiting   map[string][]item // items of the pods flying, by item.order, in order (with IDs)
	released  []item            // items of pods no longer flying, to send before the queue (with IDs)
	storedMax uint64            // the ordinal of the last batch stored
	storedSeq uint64            // the highest stream sequence stored
	holding   bool
	held      atomic.Bool // holding, read without mu (Holding)
	closed    bool
	wake      chan struct{}
	progress  chan struct{} // closed whenever something settles, if someone took it (nil until then)
	done      chan struct{}
	holdStart time.Time
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Node names the gateway node in the ids of its messages.
	Node string
	// MaxBytes bounds one batch (at most the stream's largest message); a
	// frame larger than it is stored alone.
	MaxBytes int
	// IDs names every message (Nats-Msg-Id), so that one sent again after
	// its acknowledgement was lost is stored once: for a stream across a
	// network, whose leader may die. The stream then remembers every id
	// for two minutes, which costs memory: a stream in the gateway's own
	// process, which always answers, needs none.
	IDs bool
	// OnHold is called when the writer starts holding, OnLate with each
	// message it sent again that was stored after a later one (metrics).
	OnHold func()
	OnLate func(n int)
	Logger *slog.Logger
}

// inProcessRetry is how long the writer waits before it sends again a
// message the stream said another copy of is on its way (ErrInProcess).
const inProcessRetry = 200 * time.Millisecond

// inProcessWarn is how long a message may be on its way in, as the
// stream says, before the writer logs it (once a message).
const inProcessWarn = 5 * time.Second

// maxBatchFrames bounds the frames of one batch, and so the work of
// reading one frame of it back.
const maxBatchFrames = 1024

// roundEvery is how long a writer whose backend takes rounds (round.go)
// waits after a round before it sends the next: what the node accepts
// meanwhile goes in one round, so that the stream's costs of a round (the
// flushes, reads and wakes of NATS's connection and of the stream, and
// the acknowledgement) are shared by the frames of many pods. Delivery
// never waits for it (a node alone delivers at once, and writes behind):
// only what waits for the history to be stored does (Sync, a pod opened
// again after its earlier life on the node), and that at most a round.
const roundEvery = 20 * time.Millisecond

// maxLingerBytes bounds the frames a writer keeps in its pods' open
// batches (linger): past it, every batch goes in the next round.
const maxLingerBytes = 8 << 20

// The writer reuses the batches the stream has settled, their arrays
// included, so that appending a frame allocates nothing (issue 32): at
// most maxFreeBatches of them (one for each pod a busy moment of a
// many-pods gateway writes to: a few hundred KiB), and a message's
// buffer only up to maxFreeBuffer. Every Backend is done with a message once it has called
// its done (Stream's NATS client and Memory copy it before Append
// returns).
const (
	maxFreeBatches = 4096
	maxFreeBuffer  = 64 << 10
	minBatchBuffer = 1 << 10
)

type item struct {
	subject string
	// order is the subject of the pod the frame takes its place in: its
	// own subject, or, for a marker, the pod's entries' (AppendMarker).
	order string
	frame []byte
	// index is the pod's index, and pos the frame's entry in it; index
	// is nil for a frame the index does not keep (a live frame's marker).
	index *Index
	pos   uint64
	msgID string
	n     uint64
}

// batch is one message of the stream: frames of one subject.
type batch struct {
	subject string
	order   string    // its items' order (item.order): its pod's
	open    bool      // it is its pod's open batch (Writer.open)
	gen     uint32    // counts its uses (newBatch): a lingerRef of an earlier one is stale
	since   time.Time // when it was made
	items   []item
	data    []byte
	buf     []byte // data's array when the batch is several frames, kept for reuse
	id      string
	size    int64
	ord     uint64 // the order in which it was made
	resent  bool   // sent again after the stream did not acknowledge it
	// inProcess is when the stream first said another copy of it was on
	// its way in (ErrInProcess), until it is settled; warned, whether
	// the writer said so in its log.
	inProcess time.Time
	warned    bool
	state     batchState
	w         *Writer
	done      func(seq uint64, duplicate bool, err error) // complete, made once
}

type batchState uint8

const (
	batchSending batchState = iota
	batchFailed             // to be sent again once the stream answers
	batchSettled            // stored, or refused for good
)

// NewWriter starts a writer on b.
func NewWriter(b Backend, opts WriterOptions) *Writer {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 20
	}
	w := &Writer{
		b: b, log: opts.Logger, opts: opts, prefix: opts.Node + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-",
		wake: make(chan struct{}, 1), done: make(chan struct{}), flying: map[string]int{}, waiting: map[string][]item{},
	}
	// Rounds and IDs exclude each other: a stream that takes rounds is a
	// node's own, which needs no ids (nothing is lost between two
	// messages of one connection to an in-process server), and a stream
	// across a network, which does, keeps one batch of a pod on its way
	// at a time (holdBack) and is acknowledged message by message.
	if r, ok := b.(roundBackend); ok && r.rounds() && !opts.IDs {
		w.rounds, w.linger = r, r.linger()
		w.tick = time.NewTimer(time.Hour)
		w.tick.Stop()
	}
	go w.run()
	return w
}

// Append queues frame for subject. index and entry, when set, are the
// pod's index and the frame's entry in it (as Apply returned it: Append
// takes its Pos at once), told where the frame is once it is stored.
// msgID, when set, names the frame for the stream (a frame that several
// nodes may append, like a context's conclusion event): it is sent alone
// under that id. frame must not change afterwards.
func (w *Writer) Append(subject string, frame []byte, index *Index, entry *Entry, msgID string) {
	var pos uint64
	if entry != nil {
		pos = entry.Pos
	} else {
		index = nil
	}
	w.add(item{subject: subject, order: subject, frame: frame, index: index, pos: pos, msgID: msgID})
}

// AppendMarker queues frame, the marker of a live frame of the pod whose
// entries go on subject (the live frame's place in the pod's order, no
// body: history keeps nothing else of it, and no index entry), for
// markers, the pod's subject of markers. The stream holds it in its place
// among the pod's entries: after what was appended to subject before it,
// before what is appended after it. frame must not change afterwards.
func (w *Writer) AppendMarker(subject, markers string, frame []byte) {
	w.add(item{subject: markers, order: subject, frame: frame})
}

// add queues it and wakes the writer's goroutine.
func (w *Writer) add(it item) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.appended++
	it.n = w.appended
	w.queue = append(w.queue, it)
	w.bytes += int64(len(it.frame))
	w.mu.Unlock()
	w.wakeUp()
}

// wakeUp tells the writer's goroutine there is something to do.
func (w *Writer) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Holding reports whether the writer holds: the stream did not
// acknowledge a message, and has not answered again since.
func (w *Writer) Holding() bool { return w.held.Load() }

// Pending is the bytes appended and not stored yet.
func (w *Writer) Pending() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// StoredSeq is the highest sequence the stream gave a message of this
// writer's.
func (w *Writer) StoredSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.storedSeq
}

// Progress returns a channel that is closed when the next message
// settles (is stored, or refused).
func (w *Writer) Progress() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.progressLocked()
}

// progressLocked is Progress's channel, made when the first one waits:
// most messages settle with nobody waiting. Call it with mu held.
func (w *Writer) progressLocked() chan struct{} {
	if w.progress == nil {
		w.progress = make(chan struct{})
	}
	return w.progress
}

// Sync waits until everything appended before the call is stored (or was
// refused for good), or ctx ends.
func (w *Writer) Sync(ctx context.Context) error { return w.WaitFor(ctx, w.Mark()) }

// Mark numbers what was appended so far: WaitFor(mark) waits for it.
func (w *Writer) Mark() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appended
}

// Settled reports whether everything appended up to mark is settled.
func (w *Writer) Settled(mark uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lowestUnsettled() > mark || w.closed
}

// WaitFor waits until everything appended up to mark is stored (or was
// refused for good), or ctx ends.
func (w *Writer) WaitFor(ctx context.Context, target uint64) error {
	for {
		w.mu.Lock()
		low, ch, closed := w.lowestUnsettled(), w.progressLocked(), w.closed
		hurry := low <= target && target > w.urgent
		if hurry {
			w.urgent = target // sent in the next round, lingering or not
		}
		w.mu.Unlock()
		if low > target || closed {
			return nil
		}
		if hurry {
			w.wakeUp()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Hurry sends everything appended so far in the next round, lingering or
// not (as WaitFor does for what it waits for): for one who waits for the
// writer's bytes to go down (a sender held by the node's flow control,
// pod.Throttle), which the bytes of the pods' open batches would
// otherwise keep up for podLinger.
func (w *Writer) Hurry() {
	w.mu.Lock()
	hurry := w.appended > w.urgent
	if hurry {
		w.urgent = w.appended
	}
	w.mu.Unlock()
	if hurry {
		w.wakeUp()
	}
}

// lowestUnsettled is the number of the oldest item not settled, or one
// past the last appended. Call it with mu held.
func (w *Writer) lowestUnsettled() uint64 {
	low := w.appended + 1
	for _, b := range w.sent {
		if b.state != batchSettled && b.items[0].n < low {
			low = b.items[0].n
		}
	}
	for _, b := range w.ready {
		low = min(low, b.items[0].n)
	}
	for _, r := range w.lingering[w.lhead:] {
		if r.live() {
			low = min(low, r.b.items[0].n) // made in order: the first live one is the oldest
			break
		}
	}
	if len(w.queue) > 0 && w.queue[0].n < low {
		low = w.queue[0].n
	}
	for _, it := range w.released {
		low = min(low, it.n)
	}
	for _, items := range w.waiting {
		low = min(low, items[0].n)
	}
	return low
}

// Close stops the writer; what was not stored stays unstored.
func (w *Writer) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.notifyLocked()
	w.mu.Unlock()
	close(w.done)
}

func (w *Writer) notifyLocked() {
	if w.progress != nil {
		close(w.progress)
		w.progress = nil
	}
}

// run sends what is appended, batch by batch, and holds while the stream
// does not answer. A backend that takes rounds gets one at a time, at most
// one every roundEvery.
func (w *Writer) run() {
	var out []*batch
	var tick <-chan time.Time
	if w.tick != nil {
		tick = w.tick.C
	}
	for {
		select {
		case <-w.wake:
		case <-tick:
		case <-w.done:
			return
		}
		w.mu.Lock()
		if w.holding {
			w.mu.Unlock()
			w.recover()
			continue
		}
		if w.rounds != nil {
			if len(w.sent) > 0 {
				// The round on its way wakes the writer when it is settled.
				w.mu.Unlock()
				continue
			}
			if wait := roundEvery - time.Since(w.lastRound); wait > 0 {
				// What comes meanwhile goes in this round.
				w.tick.Reset(wait)
				w.mu.Unlock()
				continue
			}
		}
		now := time.Now()
		items := w.queue
		w.queue, w.spare = w.spare[:0], nil
		if w.opts.IDs {
			items = w.holdBack(items)
		}
		w.pack(items, now)
		out = w.due(out[:0], now)
		w.sent = append(w.sent, out...)
		if w.rounds != nil {
			if len(out) > 0 {
				w.lastRound = now
			} else if w.lhead < len(w.lingering) {
				w.tick.Reset(roundEvery) // the open batches come due
			}
		}
		w.mu.Unlock()
		if w.rounds != nil {
			if len(out) > 0 {
				w.rounds.appendRound(out)
			}
		} else {
			for _, b := range out {
				w.b.Append(b.subject, b.data, b.id, b.done)
			}
		}
		clear(items)
		w.mu.Lock()
		if w.spare == nil && cap(items) <= 4096 {
			w.spare = items[:0]
		}
		w.mu.Unlock()
		clear(out)
	}
}

// holdBack sets aside the items of the pods that have a batch on its way
// to the stream (flying), each pod's in its order (waiting), and returns
// the others, after the items of the pods whose batch was stored since
// (released, which come before their pods' later items): across a network
// one message may be lost while the next one is stored (a route that
// drops between them), so that a pod whose messages were both on their
// way could have its later frames stored before its earlier ones. With
// one batch of a pod on its way at a time, a batch is sent once the one
// before it is stored, and the stream holds each pod's frames in the
// order they were appended whatever is lost. A busy pod's frames wait in
// its next batch meanwhile. Only with IDs (a stream across a network):
// a node's own stream, which takes rounds instead (round.go), loses
// nothing between two messages of one connection. Call it with mu held.
func (w *Writer) holdBack(items []item) []item {
	out := w.released
	w.released = nil
	for _, it := range items {
		if w.flying[it.order] > 0 {
			w.waiting[it.order] = append(w.waiting[it.order], it)
			continue
		}
		out = append(out, it)
	}
	clear(items)
	return out
}

// pack puts items in batches: the frames appended in a row to one subject
// of a pod, in their order, up to maxBatchFrames and MaxBytes; an item
// with an id alone. A pod has one batch open at a time (w.open), which
// takes its frames until one does not fit it: an item for the pod's other
// subject (an entry after a marker, a marker after an entry) starts a
// batch made after the one before it, which is then ready, so that the
// stream stores them in the order they were appended. With IDs a pod's
// batch counts as flying from the moment it is made (it goes out in this
// round: no linger), and the pod's items that do not fit it wait for it
// to be stored (holdBack) instead of starting another. Call it with mu
// held.
func (w *Writer) pack(items []item, now time.Time) {
	if w.open == nil {
		w.open = map[string]*batch{}
	}
	for _, it := range items {
		b := w.open[it.order]
		fits := b != nil && it.msgID == "" && b.subject == it.subject && len(b.items) < maxBatchFrames && int(b.size)+len(it.frame)+16 <= w.opts.MaxBytes
		if fits {
			b.items = append(b.items, it)
			b.size += int64(len(it.frame))
			continue
		}
		if b != nil {
			b.open = false
			delete(w.open, it.order)
			w.ready = append(w.ready, b)
		}
		if w.opts.IDs && w.flying[it.order] > 0 {
			// One batch of a pod on its way at a time (holdBack): the
			// rest of the pod's frames wait for it.
			w.waiting[it.order] = append(w.waiting[it.order], it)
			continue
		}
		b = w.newBatch(it.subject)
		b.order, b.since = it.order, now
		if w.opts.IDs {
			w.flying[it.order]++
		}
		if it.msgID == "" {
			b.open = true
			w.open[it.order] = b
			w.lingering = append(w.lingering, lingerRef{b, b.gen})
		} else {
			w.ready = append(w.ready, b) // sent alone, under its own id
		}
		b.items = append(b.items, it)
		b.size += int64(len(it.frame))
	}
}

// lingerRef is an open batch in the order made (Writer.lingering): stale
// once the batch is no longer open, or is in use again.
type lingerRef struct {
	b   *batch
	gen uint32
}

func (r lingerRef) live() bool { return r.b.gen == r.gen && r.b.open }

// due appends to out the batches to send now: every ready one, then, in
// the order made, each open one made w.linger ago, or holding an item
// someone waits for (WaitFor), or every one when they hold more than
// maxLingerBytes. A pod's ready batches were made before its open one,
// and go before it. A batch of one frame is the frame itself, not a copy.
// Call it with mu held.
func (w *Writer) due(out []*batch, now time.Time) []*batch {
	out = append(out, w.ready...)
	clear(w.ready)
	w.ready = w.ready[:0]
	all := w.linger == 0 || w.bytes > maxLingerBytes
	for w.lhead < len(w.lingering) {
		r := w.lingering[w.lhead]
		if r.live() {
			if !all && now.Sub(r.b.since) < w.linger && r.b.items[0].n > w.urgent {
				break // and so are the ones made after it
			}
			r.b.open = false
			delete(w.open, r.b.order)
			out = append(out, r.b)
		}
		w.lingering[w.lhead] = lingerRef{}
		w.lhead++
	}
	switch {
	case w.lhead == len(w.lingering):
		w.lingering, w.lhead = w.lingering[:0], 0
	case w.lhead > 1024 && 2*w.lhead > len(w.lingering):
		n := copy(w.lingering, w.lingering[w.lhead:])
		clear(w.lingering[n:])
		w.lingering, w.lhead = w.lingering[:n], 0
	}
	for _, b := range out {
		if len(b.items) == 1 {
			b.data = b.items[0].frame
		} else {
			if size := batchSize(b.items); cap(b.buf) < size {
				// Room for a little more: the next use of b, for any pod,
				// is most often about as large.
				b.buf = make([]byte, 0, max(minBatchBuffer, size+size/2))
			}
			b.data = appendBatch(b.buf[:0], b.items)
			b.buf = b.data[:0]
		}
		w.batches++
		b.ord = w.batches
		if id := b.items[0].msgID; id != "" {
			b.id = id
		} else if w.opts.IDs {
			b.id = w.prefix + strconv.FormatUint(w.batches, 36)
		}
	}
	return out
}

// newBatch is an empty batch of subject, a settled one reused when there
// is one. Call it with mu held.
func (w *Writer) newBatch(subject string) *batch {
	var b *batch
	if n := len(w.free); n > 0 {
		b = w.free[n-1]
		w.free[n-1] = nil
		w.free = w.free[:n-1]
	} else {
		b = &batch{w: w}
		b.done = b.complete
	}
	b.subject = subject
	b.gen++
	return b
}

// recycle keeps b, settled and out of sent, for newBatch. Call it with
// mu held.
func (w *Writer) recycle(b *batch) {
	if len(w.free) >= maxFreeBatches {
		return
	}
	clear(b.items) // the frames and the indexes they point to
	b.items = b.items[:0]
	if cap(b.buf) > maxFreeBuffer {
		b.buf = nil
	}
	b.subject, b.order, b.open, b.since = "", "", false, time.Time{}
	b.data, b.id, b.size, b.ord, b.resent, b.state = nil, "", 0, 0, false, batchSending
	b.inProcess, b.warned = time.Time{}, false
	w.free = append(w.free, b)
}

// complete is the stream's answer about b.
func (b *batch) complete(seq uint64, duplicate bool, err error) {
	w := b.w
	w.mu.Lock()
	if b.state == batchSettled {
		w.mu.Unlock()
		return
	}
	switch {
	case err == nil:
	case err == ErrInProcess:
		// Neither stored nor lost yet: asked again in a moment, and the
		// pod's next batch waits for the answer (holdBack).
		now := time.Now()
		if b.inProcess.IsZero() {
			b.inProcess = now
		}
		warn := !b.warned && now.Sub(b.inProcess) > inProcessWarn
		b.warned = b.warned || warn
		w.mu.Unlock()
		if warn {
			w.log.Warn("the history stream still says another copy of a message is on its way in; its pod's next messages wait", "subject", b.subject, "for", now.Sub(b.inProcess).Round(time.Millisecond).String())
		}
		time.AfterFunc(inProcessRetry, func() {
			w.mu.Lock()
			closed := w.closed || b.state != batchSending
			w.mu.Unlock()
			if !closed {
				w.b.Append(b.subject, b.data, b.id, b.done)
			}
		})
		return
	case rejected(err):
		// Sending it again would be refused again: its entries stay out
		// of the history (they were delivered live).
		w.log.Error("the history stream refused a message; its envelopes are not in the history", "subject", b.subject, "frames", len(b.items), "err", err)
	default:
		b.state = batchFailed
		if !w.holding && !w.closed {
			w.holding, w.holdStart = true, time.Now()
			w.held.Store(true)
			backlog := -1
			if a, ok := w.b.(interface{ AckBacklog() int }); ok {
				backlog = a.AckBacklog()
			}
			w.log.Warn("the history stream does not acknowledge; holding what comes until it does", "subject", b.subject, "err", err,
				"answers_waiting", backlog)
			if w.opts.OnHold != nil {
				w.opts.OnHold()
			}
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
		return
	}
	b.state = batchSettled
	w.bytes -= b.size
	if w.opts.IDs {
		// The pod's next batch may go (holdBack).
		if w.flying[b.order]--; w.flying[b.order] <= 0 {
			delete(w.flying, b.order)
			if next := w.waiting[b.order]; len(next) > 0 {
				w.released = append(w.released, next...)
				delete(w.waiting, b.order)
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	late := false
	if err != nil {
		seq = 0 // refused: not in the history
	} else {
		// Sent again and stored only now, after a later one: out of its
		// place (one stored the first time, and acknowledged too late,
		// is a duplicate and in its place).
		late = b.resent && !duplicate && b.ord < w.storedMax
		w.storedMax = max(w.storedMax, b.ord)
		w.storedSeq = max(w.storedSeq, seq)
	}
	// The index learns where its entries are before anyone waiting for
	// the writer (Sync) hears that they are stored.
	b.stored(seq)
	n := 0
	for n < len(w.sent) && w.sent[n].state == batchSettled {
		w.recycle(w.sent[n])
		w.sent[n] = nil
		n++
	}
	switch {
	case n < len(w.sent):
		w.sent = w.sent[n:]
	case cap(w.sent) > 4096:
		w.sent = nil // a hold's worth
	default:
		w.sent = w.sent[:0] // its array, reused: most batches settle alone
	}
	if w.rounds != nil && len(w.sent) == 0 && (len(w.queue) > 0 || w.lhead < len(w.lingering)) {
		w.wakeUp() // the next round
	}
	w.notifyLocked()
	w.mu.Unlock()
	if late && w.opts.OnLate != nil {
		w.opts.OnLate(1)
	}
}

// rejected reports whether err is the stream's refusal for good
// (RejectedError); apart, so that an answer with no error allocates
// nothing (errors.As's target escapes).
func rejected(err error) bool {
	var r *RejectedError
	return errors.As(err, &r)
}

// stored tells the pod's index where b's entries are (seq 0: nowhere):
// a batch is one subject's, and so one pod's.
func (b *batch) stored(seq uint64) {
	for i := range b.items {
		if x := b.items[i].index; x != nil {
			x.storedItems(b.items, seq)
			return
		}
	}
}

// recover waits until the stream answers, then sends again, in order,
// every message that failed, and stops holding.
func (w *Writer) recover() {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := w.b.Ready(ctx)
		cancel()
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		if err == nil {
			var again []*batch
			for _, b := range w.sent {
				if b.state == batchFailed {
					b.state, b.resent = batchSending, true
					again = append(again, b)
				}
			}
			w.holding = false
			w.held.Store(false)
			held := time.Since(w.holdStart)
			w.mu.Unlock()
			w.log.Warn("the history stream answers again; sending again what it did not acknowledge", "messages", len(again), "held", held.Round(time.Millisecond).String())
			for _, b := range again {
				w.b.Append(b.subject, b.data, b.id, b.done)
			}
			select {
			case w.wake <- struct{}{}: // what was appended meanwhile
			default:
			}
			return
		}
		w.mu.Unlock()
		select {
		case <-w.done:
			return
		case <-time.After(wait):
		}
	}
}
