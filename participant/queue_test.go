package participant

import (
	"bytes"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// slowConsumerReason is the reason of the close frame a participant cut
// for a full queue gets.
const slowConsumerReason = "slow consumer: send queue full"

// TestQueueBoundedByCount fills the queue of a participant that is not
// started yet (its deliveries only queue) to SendQueue messages: the next
// is refused and the participant is cut as a slow consumer, once, and its
// client reads the 4008 close and nothing that was queued.
func TestQueueBoundedByCount(t *testing.T) {
	s, client := open(t, setup{sendQueue: 4})
	for i := range 4 {
		if !s.p.Enqueue(body(i, 100)) {
			t.Fatalf("message %d of a queue of 4 was refused", i)
		}
	}
	if n, size := s.p.Queued(); n != 4 || size != 400 {
		t.Fatalf("Queued() = %d, %d; want 4 messages, 400 bytes", n, size)
	}
	if s.p.Enqueue(body(4, 100)) {
		t.Fatal("a fifth message went into a queue of 4")
	}
	if reason := s.waitCut(t); reason != CutSlowConsumer {
		t.Fatalf("cut for %q, want %q", reason, CutSlowConsumer)
	}
	if s.p.Enqueue(body(5, 1)) || s.p.Answer(body(6, 1)) {
		t.Fatal("a participant cut as a slow consumer took more")
	}
	if before := wantClose(t, client, 4008, slowConsumerReason); len(before) > 0 {
		t.Fatalf("a participant cut before it started was sent %d messages", len(before))
	}
	s.waitDone(t)
	if cuts := s.cutReasons(); len(cuts) != 1 {
		t.Fatalf("OnCut was called %d times (%v), want once", len(cuts), cuts)
	}
}

// TestQueueBoundedByBytes fills the queue to exactly SendQueueBytes: a
// message more, however small, is refused and cuts the participant.
func TestQueueBoundedByBytes(t *testing.T) {
	s, client := open(t, setup{sendQueue: 100, queueBytes: 1000})
	for i := range 10 {
		if !s.p.Enqueue(body(i, 100)) {
			t.Fatalf("message %d (%d bytes queued) was refused by a bound of 1000 bytes", i, 100*i)
		}
	}
	if s.p.Enqueue([]byte("x")) {
		t.Fatal("a byte more than SendQueueBytes went into the queue")
	}
	if reason := s.waitCut(t); reason != CutSlowConsumer {
		t.Fatalf("cut for %q, want %q", reason, CutSlowConsumer)
	}
	wantClose(t, client, 4008, slowConsumerReason)
}

// TestQueueLetsOneMessageInWhateverItsSize: a message larger than
// SendQueueBytes still goes into an empty queue and out whole (else an
// envelope over the bound could never be delivered), but nothing joins it
// while it waits.
func TestQueueLetsOneMessageInWhateverItsSize(t *testing.T) {
	s, client := open(t, setup{sendQueue: 100, queueBytes: 1000})
	s.p.Start(nil)
	for i := range 2 {
		huge := body(i, 100_000)
		s.send(t, huge)
		if got := read(t, client); !bytes.Equal(got, huge) {
			t.Fatalf("sent %d bytes through a queue of 1000, the client read %d", len(huge), len(got))
		}
	}
	s2, client2 := open(t, setup{sendQueue: 100, queueBytes: 1000})
	if !s2.p.Enqueue(body(0, 100_000)) {
		t.Fatal("a message over SendQueueBytes was refused by an empty queue")
	}
	if s2.p.Enqueue(body(1, 8)) {
		t.Fatal("a message joined one that alone is over SendQueueBytes")
	}
	if reason := s2.waitCut(t); reason != CutSlowConsumer {
		t.Fatalf("cut for %q, want %q", reason, CutSlowConsumer)
	}
	wantClose(t, client2, 4008, slowConsumerReason)
}

// TestSlowConsumerCutWhenItStopsReading: a client that stops reading
// while the pod keeps sending fills the socket, then its queue; the
// participant is cut with 4008 as soon as a message does not fit, and
// when the client reads again it gets, in order, a prefix of what was
// sent, then the close.
func TestSlowConsumerCutWhenItStopsReading(t *testing.T) {
	const queue = 16
	s, client := open(t, setup{sendQueue: queue, smallSockets: true})
	s.p.Start(nil)
	sent := 0
	for ; sent < 100_000; sent++ {
		if !s.p.Enqueue(body(sent, 8<<10)) {
			break
		}
		s.p.Flush()
	}
	if reason := s.waitCut(t); reason != CutSlowConsumer {
		t.Fatalf("cut for %q, want %q", reason, CutSlowConsumer)
	}
	if sent < queue {
		t.Fatalf("cut after %d messages, fewer than a queue of %d", sent, queue)
	}
	before := wantClose(t, client, 4008, slowConsumerReason)
	for i, b := range before {
		if got := indexOf(t, b); got != i {
			t.Fatalf("message %d the client read is the one sent %d-th", i, got)
		}
	}
	if len(before) > sent {
		t.Fatalf("the client read %d messages of %d sent", len(before), sent)
	}
	s.waitDone(t)
}

// TestQueuedGoesOutInOrder: a joiner's source (its welcome and replay)
// first, then what was queued before the participant started, then what
// is sent while the client reads, in bursts of every size, in the order
// it was queued.
func TestQueuedGoesOutInOrder(t *testing.T) {
	s, client := open(t, setup{sendQueue: 1 << 16})
	next := 0
	replay := &sliceSource{}
	for ; next < 600; next++ { // more than one batch of the source
		replay.items = append(replay.items, body(next, 40+next%300))
	}
	for ; next < 700; next++ {
		if !s.p.Enqueue(body(next, 50)) {
			t.Fatalf("message %d refused before Start", next)
		}
	}
	s.p.Start(replay)
	got := make(chan int, 1)
	go func() {
		i := 0
		for ; ; i++ {
			_, b, err := readOrEnd(client)
			if err != nil || !bytes.HasPrefix(b, body(i, 8)) {
				break
			}
		}
		got <- i
	}()
	for burst := 1; next < 5000; burst = burst%97 + 1 {
		var bodies [][]byte
		for range burst {
			bodies = append(bodies, body(next, 10+next%2000))
			next++
		}
		s.send(t, bodies...)
	}
	s.p.CloseAfterDrain(StatusGoingAway, "done")
	if i := <-got; i != next {
		t.Fatalf("the client read %d messages in order, of %d sent", i, next)
	}
}

// sliceSource is a Source that gives its items, as a replay does.
type sliceSource struct {
	items [][]byte
	err   error // given once the items are gone
}

func (s *sliceSource) Next(dst [][]byte, max, maxBytes int) ([][]byte, error) {
	size := 0
	for len(s.items) > 0 && max > 0 {
		if size += len(s.items[0]); size > maxBytes && len(dst) > 0 {
			break
		}
		dst = append(dst, s.items[0])
		s.items = s.items[1:]
		max--
	}
	if len(dst) == 0 && s.err != nil {
		return dst, s.err
	}
	return dst, nil
}

// TestBatchSendsOneLinePerEnvelope: with batch=1, what one write sends is
// one text message of the envelopes joined by newlines, in order, never
// more than maxBatchItems of them; an envelope alone is sent as it is.
func TestBatchSendsOneLinePerEnvelope(t *testing.T) {
	s, client := open(t, setup{query: url.Values{"batch": {"1"}}})
	var want []string
	for i := range 5 {
		b := body(i, 30)
		want = append(want, string(b))
		if !s.p.Enqueue(b) {
			t.Fatal("refused before Start")
		}
	}
	s.p.Start(nil)
	if got := string(read(t, client)); got != string(bytes.Join(toBytes(want), []byte("\n"))) {
		t.Fatalf("five envelopes queued before Start came as %q, want one message of five lines", got)
	}

	alone := body(5, 30)
	s.send(t, alone)
	if got := read(t, client); !bytes.Equal(got, alone) {
		t.Fatalf("an envelope alone came as %q, want it as it is", got)
	}

	// A burst of more than one batch holds.
	var burst [][]byte
	for i := range maxBatchItems + 44 {
		burst = append(burst, body(6+i, 20))
	}
	s.send(t, burst...)
	var lines [][]byte
	for len(lines) < len(burst) {
		m := bytes.Split(read(t, client), []byte("\n"))
		if len(m) > maxBatchItems {
			t.Fatalf("a batched message held %d envelopes, over %d", len(m), maxBatchItems)
		}
		lines = append(lines, m...)
	}
	if !slices.EqualFunc(lines, burst, bytes.Equal) {
		t.Fatalf("the burst's %d envelopes came as %d lines, not the same in the same order", len(burst), len(lines))
	}
}

func toBytes(ss []string) [][]byte {
	var out [][]byte
	for _, s := range ss {
		out = append(out, []byte(s))
	}
	return out
}

// TestBurstIsWrittenInOneWrite: the envelopes the pod queues in one burst
// (Enqueue each, Flush once) go out in one write of that many messages,
// as OnWrite tells the gateway's metrics.
func TestBurstIsWrittenInOneWrite(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	var bodies [][]byte
	for i := range 50 {
		bodies = append(bodies, body(i, 200))
	}
	s.send(t, bodies...)
	for i := range bodies {
		if got := indexOf(t, read(t, client)); got != i {
			t.Fatalf("message %d the client read is the one sent %d-th", i, got)
		}
	}
	if w := s.writeCounts(); !slices.Equal(w, []int{50}) {
		t.Fatalf("a burst of 50 was written in writes of %v messages, want one of 50", w)
	}
}

// TestIdleWriterComesBack: a writer goroutine that Watch lets go when
// idle leaves nothing behind; what is sent afterwards goes out.
func TestIdleWriterComesBack(t *testing.T) {
	s, client := open(t, setup{})
	// A source always takes the writer goroutine.
	s.p.Start(&sliceSource{items: [][]byte{body(0, 10)}})
	if got := indexOf(t, read(t, client)); got != 0 {
		t.Fatalf("read message %d, want the source's", got)
	}
	eventually(t, "Watch never let the idle writer go", func() bool {
		s.p.Watch(time.Now())
		return !s.p.writerOn.Load()
	})
	for i := 1; i <= 3; i++ {
		s.send(t, body(i, 10))
		if got := indexOf(t, read(t, client)); got != i {
			t.Fatalf("read message %d, want %d", got, i)
		}
	}
}

// TestNoWakeUpIsLost races senders against each other and against what
// lets the writer's role go (writeNow ending its write, Watch parking an
// idle writer goroutine): in each round two goroutines send at once, one
// as the pod's fan-out does, one as the gateway answers, while Watch
// runs; both messages must come without a later send to wake the writer.
// Last, a drain races Watch, and its close must come.
func TestNoWakeUpIsLost(t *testing.T) {
	s, client := open(t, setup{})
	s.p.Start(nil)
	got := readAll(client)
	const rounds = 200
	for i := range rounds {
		// Now and then one too large for the socket to take at once,
		// so that the writer goroutine finishes it and idles, for
		// Watch to park.
		size := 20
		if i%10 == 0 {
			size = 1 << 20
		}
		var start, done sync.WaitGroup
		start.Add(1)
		done.Add(3)
		go func() {
			defer done.Done()
			start.Wait()
			s.p.Watch(time.Now())
			s.p.Watch(time.Now())
		}()
		go func() {
			defer done.Done()
			start.Wait()
			if !s.p.Enqueue(body(2*i, size)) {
				t.Error("Enqueue refused")
			}
			s.p.Flush()
		}()
		go func() {
			defer done.Done()
			start.Wait()
			if !s.p.Answer(body(2*i+1, 20)) {
				t.Error("Answer refused")
			}
		}()
		start.Done()
		done.Wait()
		a, b := indexOf(t, next(t, got)), indexOf(t, next(t, got))
		if min(a, b) != 2*i || max(a, b) != 2*i+1 {
			t.Fatalf("round %d: read messages %d and %d, want %d and %d", i, a, b, 2*i, 2*i+1)
		}
	}
	go s.p.Watch(time.Now())
	s.p.CloseAfterDrain(StatusGoingAway, "gateway shutting down")
	s.waitDone(t)
}

// TestWorkArrivingDuringAWriteIsNotLost: an answer queued, or a drain
// begun, by another goroutine while a send writes from its own goroutine
// (writeNow, holding the writer's role, so that the other only signals)
// is still written when that write ends, with no later send to wake the
// writer.
func TestWorkArrivingDuringAWriteIsNotLost(t *testing.T) {
	t.Run("answer", func(t *testing.T) {
		var once sync.Once
		s, client := open(t, setup{duringWrite: func(p *Participant) {
			once.Do(func() { p.Answer(body(1, 20)) })
		}})
		s.p.Start(nil)
		s.send(t, body(0, 20))
		for i := range 2 {
			if got := indexOf(t, read(t, client)); got != i {
				t.Fatalf("read message %d, want %d", got, i)
			}
		}
	})
	t.Run("drain", func(t *testing.T) {
		var once sync.Once
		s, client := open(t, setup{duringWrite: func(p *Participant) {
			once.Do(func() { p.CloseAfterDrain(StatusGoingAway, "gateway shutting down") })
		}})
		s.p.Start(nil)
		s.send(t, body(0, 20))
		if before := wantClose(t, client, 1001, "gateway shutting down"); len(before) != 1 {
			t.Fatalf("read %d messages before the close, want the one sent", len(before))
		}
		s.waitDone(t)
	})
}
