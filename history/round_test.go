package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mcpp/gateway/envelope"
)

// ownStream is a stream of this process's own (Config.Own), as a gateway
// node alone runs it, in JetStream's file store, with its server and a
// second connection to it: a client of --nats-port.
type ownStream struct {
	*Stream
	other *nats.Conn
}

func openOwnStream(t *testing.T, maxMsgSize int32, opts ...func(*Config)) ownStream {
	t.Helper()
	dir := t.TempDir()
	ns, err := server.NewServer(&server.Options{
		ServerName: "history-own", DontListen: true, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir, JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 1 << 30, MaxPending: 1 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	conns := make([]*nats.Conn, 2)
	for i := range conns {
		if conns[i], err = nats.Connect("", nats.InProcessServer(ns)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := Config{Subjects: []string{"mcpp.pod.>"}, Entries: 5000, MaxAge: time.Hour,
		MaxBytes: 256 << 20, MaxMsgSize: maxMsgSize, File: true, Temporary: true, Own: true}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := Open(ctx, conns[0], cfg, "own")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		for _, nc := range conns {
			nc.Close()
		}
		ns.Shutdown()
	})
	return ownStream{Stream: s, other: conns[1]}
}

// roundOf is a writer's round of one-frame messages, each on its own
// subject, and what the stream answered for each.
type roundOf struct {
	msgs    []*batch
	mu      sync.Mutex
	seqs    []uint64
	errs    []error
	settled sync.WaitGroup
}

func newRound(frames ...[]byte) *roundOf {
	r := &roundOf{seqs: make([]uint64, len(frames)), errs: make([]error, len(frames))}
	for i, f := range frames {
		r.settled.Add(1)
		r.msgs = append(r.msgs, &batch{subject: fmt.Sprintf("mcpp.pod.r%d", i), data: f, done: func(seq uint64, _ bool, err error) {
			r.mu.Lock()
			r.seqs[i], r.errs[i] = seq, err
			r.mu.Unlock()
			r.settled.Done()
		}})
	}
	return r
}

func (r *roundOf) wait(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.settled.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the round was not settled within 10s")
	}
}

// readsBack checks that the stream holds frame at seq, on subject.
func readsBack(t *testing.T, s *Stream, subject string, seq uint64, frame []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []byte
	if err := s.Read(ctx, subject, []uint64{seq}, func(m StoredMsg) error { got = m.Data; return nil }); err != nil {
		t.Fatalf("reading %s at %d: %v", subject, seq, err)
	}
	if string(got) != string(frame) {
		t.Fatalf("%s at %d holds %q, want %q", subject, seq, got, frame)
	}
}

// acks counts the acknowledgements the stream sends this Stream, as a
// client of --nats-port hears them: each is counted by the time Load
// returns (a synchronous subscription's queue, filled by the client's
// reader before the answer to a flush).
func acks(t *testing.T, s ownStream) ackCount {
	t.Helper()
	sub, err := s.other.SubscribeSync(s.ackPrefix + "*")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := s.other.Flush(); err != nil {
		t.Fatal(err)
	}
	return ackCount{t, s.other, sub}
}

type ackCount struct {
	t   *testing.T
	nc  *nats.Conn
	sub *nats.Subscription
}

// Load is the acknowledgements sent so far.
func (a ackCount) Load() int64 {
	a.t.Helper()
	if err := a.nc.Flush(); err != nil {
		a.t.Fatal(err)
	}
	n, _, err := a.sub.Pending()
	if err != nil {
		a.t.Fatal(err)
	}
	return int64(n)
}

// TestRoundOneAcknowledgement: a round of messages is stored, each where
// the stream says, with one acknowledgement for all of them.
func TestRoundOneAcknowledgement(t *testing.T) {
	s := openOwnStream(t, 1<<20)
	n := acks(t, s)
	r := newRound(frameOf("a"), frameOf("b"), frameOf("c"), frameOf("d"))
	s.appendRound(r.msgs)
	r.wait(t)
	for i, m := range r.msgs {
		if r.errs[i] != nil || r.seqs[i] != uint64(i+1) {
			t.Fatalf("message %d: stored at %d (%v), want %d", i, r.seqs[i], r.errs[i], i+1)
		}
		readsBack(t, s.Stream, m.subject, r.seqs[i], m.data)
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("the stream sent %d acknowledgements for a round of 4, want 1", got)
	}
}

// TestRoundAfterAnotherWriter: someone else published into the stream
// (a client of --nats-port) just before a round: the round's messages are
// not where the stream's last answer said the next ones would be; they
// are found, each where it is, and the other's message is left alone.
func TestRoundAfterAnotherWriter(t *testing.T) {
	s := openOwnStream(t, 1<<20)
	if err := s.other.Publish("mcpp.pod.r1", []byte("not the writer's")); err != nil {
		t.Fatal(err)
	}
	if err := s.other.Flush(); err != nil {
		t.Fatal(err)
	}
	r := newRound(frameOf("a"), frameOf("b"), frameOf("c"))
	s.appendRound(r.msgs)
	r.wait(t)
	for i, m := range r.msgs {
		if r.errs[i] != nil || r.seqs[i] != uint64(i+2) {
			t.Fatalf("message %d: stored at %d (%v), want %d", i, r.seqs[i], r.errs[i], i+2)
		}
		readsBack(t, s.Stream, m.subject, r.seqs[i], m.data)
	}
	readsBack(t, s.Stream, "mcpp.pod.r1", 1, []byte("not the writer's"))
}

// TestRoundWithARefusedMessage: the stream refuses messages of a round
// for their size, in the middle and last: each is told the stream's
// refusal (answered on its own: TestRoundRefusedBesideAnotherWriter), the
// others are where they are, and the next round follows on.
func TestRoundWithARefusedMessage(t *testing.T) {
	s := openOwnStream(t, 1024)
	big := frameOf(strings.Repeat("x", 2048))
	r := newRound(frameOf("a"), big, frameOf("c"), big)
	s.appendRound(r.msgs)
	r.wait(t)
	for _, i := range []int{0, 2} {
		if r.errs[i] != nil || r.seqs[i] == 0 {
			t.Fatalf("message %d: stored at %d (%v), want stored", i, r.seqs[i], r.errs[i])
		}
		readsBack(t, s.Stream, r.msgs[i].subject, r.seqs[i], r.msgs[i].data)
	}
	if r.seqs[0] != 1 || r.seqs[2] != 2 {
		t.Fatalf("stored at %d and %d, want 1 and 2", r.seqs[0], r.seqs[2])
	}
	for _, i := range []int{1, 3} {
		var rej *RejectedError
		if !errors.As(r.errs[i], &rej) || r.seqs[i] != 0 {
			t.Fatalf("the refused message %d: %d, %v; want the stream's refusal", i, r.seqs[i], r.errs[i])
		}
	}
	// The next round follows on.
	r2 := newRound(frameOf("e"), frameOf("f"))
	s.appendRound(r2.msgs)
	r2.wait(t)
	if r2.seqs[0] != 3 || r2.seqs[1] != 4 || r2.errs[0] != nil || r2.errs[1] != nil {
		t.Fatalf("the next round: %v %v, want 3 and 4", r2.seqs, r2.errs)
	}
}

// TestRoundMessageNotFound: a message of a round that the stream did not
// store, unanswered (refused for want of room, say), is told as not
// stored, to be sent again, answered; the others are found where they
// are, past another client's message with the same subject.
func TestRoundMessageNotFound(t *testing.T) {
	s := openOwnStream(t, 1<<20)
	r := newRound(frameOf("a"), frameOf("b"), frameOf("c"))
	for _, i := range []int{0, 2} {
		for _, data := range [][]byte{[]byte("not the writer's"), r.msgs[i].data} {
			if _, err := s.other.Request(r.msgs[i].subject, data, 5*time.Second); err != nil { // stored when answered
				t.Fatal(err)
			}
		}
	}
	s.resolve(s.newGroup(r.msgs), 0, 0, nil)
	r.wait(t)
	if r.seqs[0] != 2 || r.seqs[2] != 4 || r.errs[0] != nil || r.errs[2] != nil {
		t.Fatalf("found at %v (%v), want 2 and 4", r.seqs, r.errs)
	}
	if !errors.Is(r.errs[1], errNotStored) || r.seqs[1] != 0 {
		t.Fatalf("the message not stored: %d, %v; want not stored", r.seqs[1], r.errs[1])
	}
}

// TestWriterRoundsBesideAnotherWriter: a writer on a stream of its own
// stores many pods' frames in rounds while another client publishes into
// the stream the whole time; every entry is stored, where its index says,
// each pod's in its order, and the writer took far fewer acknowledgements
// than it stored messages. A frame too large for the stream is refused,
// and the ones after it are stored.
func TestWriterRoundsBesideAnotherWriter(t *testing.T) {
	s := openOwnStream(t, 16<<10)
	n := acks(t, s)
	var held atomic.Int64
	w := NewWriter(s.Stream, WriterOptions{Node: "n", MaxBytes: 16 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnHold: func() { held.Add(1) }})
	defer w.Close()
	const other = "another writer's"
	stop := make(chan struct{})
	var others sync.WaitGroup
	others.Add(1)
	go func() {
		defer others.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = s.other.Publish(fmt.Sprintf("mcpp.pod.p%d", i%7), []byte(other))
			if i%5 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	const pods, each, tooLarge = 40, 150, 77
	xs := make([]*Index, pods)
	for i := range xs {
		xs[i] = NewIndex(each, time.Hour)
	}
	frames := map[string][]byte{}
	for k := range each {
		for i, x := range xs {
			id := fmt.Sprintf("p%d-%d", i, k)
			f := frameOf(id)
			if k == tooLarge && i == 3 {
				f = frameOf(id + strings.Repeat("x", 32<<10))
			}
			frames[id] = f
			var m envelope.Meta
			body, _ := envelope.DecodeFrame(f, &m)
			e := x.Apply(uint64(k+1), time.Now().UnixNano(), f, &m, len(body), 0, Loc{})
			w.Append(fmt.Sprintf("mcpp.pod.p%d", i), f, x, e, "")
		}
		if k%10 == 0 {
			time.Sleep(time.Millisecond) // rounds of every size
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	others.Wait()
	stored := 0
	for i, x := range xs {
		sel := x.Newest(0, false, all)
		locs := x.Locations(sel.Entries)
		var last Loc
		for k, l := range locs {
			id := fmt.Sprintf("p%d-%d", i, k)
			if k == tooLarge && i == 3 {
				if l.Seq != 0 || l.Frame != nil {
					t.Fatalf("%s, too large for the stream, is at %+v", id, l)
				}
				continue
			}
			if l.Seq == 0 || l.Frame != nil {
				t.Fatalf("%s is not stored after Sync: %+v", id, l)
			}
			if l.Seq < last.Seq || l.Seq == last.Seq && l.Off <= last.Off {
				t.Fatalf("%s is at %+v, not after the pod's previous entry at %+v", id, l.Loc, last)
			}
			last = l.Loc
			var got []byte
			err := s.Read(ctx, fmt.Sprintf("mcpp.pod.p%d", i), []uint64{l.Seq}, func(m StoredMsg) error {
				f, err := Frame(m.Data, l.Off)
				got = f
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(frames[id]) {
				t.Fatalf("%s reads back as %q", id, got)
			}
			stored++
		}
	}
	if stored != pods*each-1 {
		t.Fatalf("%d entries stored, want %d", stored, pods*each-1)
	}
	subjects := make([]string, pods)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("mcpp.pod.p%d", i)
	}
	mine := int64(0)
	if err := s.Scan(ctx, subjects, 1, func(_ string, m StoredMsg) error {
		if string(m.Data) != other {
			mine++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the writer stored %d messages with %d acknowledgements (%d holds)", mine, n.Load(), held.Load())
	if got := n.Load(); got*3 > mine {
		t.Fatalf("%d acknowledgements for %d messages: rounds should take far fewer", got, mine)
	}
}

// TestWriterLingersAPodsFrames: on a node's own temporary store, a pod's
// frames that come within podLinger are stored as few messages, in their
// order across the pod's two subjects, without anyone waiting for them.
func TestWriterLingersAPodsFrames(t *testing.T) {
	s := openOwnStream(t, 1<<20)
	w := NewWriter(s.Stream, WriterOptions{Node: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	const pod, markers = "mcpp.pod.lab", "mcpp.pod.lab.live"
	var want []string
	for i := range 10 {
		id := fmt.Sprintf("f%d", i)
		want = append(want, id)
		if i == 3 || i == 4 {
			w.AppendMarker(pod, markers, frameOf(id))
		} else {
			w.Append(pod, frameOf(id), nil, nil, "")
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still not stored after 10s", w.Pending())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []string
	messages := 0
	if err := s.Scan(ctx, []string{pod, markers}, 1, func(_ string, m StoredMsg) error {
		messages++
		return Frames(m.Data, func(_ int, frame []byte) error {
			var meta envelope.Meta
			if _, err := envelope.DecodeFrame(frame, &meta); err != nil {
				return err
			}
			got = append(got, meta.ID)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the stream holds the pod's frames in the order %v, want %v", got, want)
	}
	t.Logf("10 frames in %d messages", messages)
	if messages >= len(want) {
		t.Fatalf("10 frames within a second took %d messages: a pod's batch should take its frames for a second", messages)
	}
}

// TestRoundRefusedBesideAnotherWriter: someone else published one message
// into the stream just before a round, and the stream refuses one of the
// round's messages (too large for it): the round's last answer lands
// where the writer's count says (one message more, one less), and yet
// the refused message is not stored, nor told where the other's message
// is. A message the stream may refuse for its size is answered on its
// own, as every message was before the rounds.
func TestRoundRefusedBesideAnotherWriter(t *testing.T) {
	s := openOwnStream(t, 1024)
	if err := s.other.Publish("mcpp.pod.r1", []byte("not the writer's")); err != nil {
		t.Fatal(err)
	}
	if err := s.other.Flush(); err != nil {
		t.Fatal(err)
	}
	big := frameOf(strings.Repeat("x", 2048))
	r := newRound(frameOf("a"), big, frameOf("c"))
	s.appendRound(r.msgs)
	r.wait(t)
	var rej *RejectedError
	if !errors.As(r.errs[1], &rej) || r.seqs[1] != 0 {
		t.Fatalf("the refused message: stored at %d (%v); want the stream's refusal", r.seqs[1], r.errs[1])
	}
	for _, i := range []int{0, 2} {
		if r.errs[i] != nil || r.seqs[i] == 0 {
			t.Fatalf("message %d: stored at %d (%v), want stored", i, r.seqs[i], r.errs[i])
		}
		readsBack(t, s.Stream, r.msgs[i].subject, r.seqs[i], r.msgs[i].data)
	}
	readsBack(t, s.Stream, "mcpp.pod.r1", 1, []byte("not the writer's"))
}

// TestRoundAfterALostAcknowledgement: the answer for a message before a
// group never came (a slow consumer's drop), and the message is stored
// in the group's span; a message of the group is refused unanswered (put
// in the group by hand: a round sends one the stream may refuse for its
// size alone). The count of the span comes out right, and proves
// nothing: the group is looked for, and each message told where it is.
func TestRoundAfterALostAcknowledgement(t *testing.T) {
	s := openOwnStream(t, 1024)
	lostDone := make(chan error, 1)
	s.wait(pendingAck{done: func(_ uint64, _ bool, err error) { lostDone <- err }})
	if err := s.nc.Publish("mcpp.pod.lost", frameOf("lost")); err != nil {
		t.Fatal(err)
	}
	r := newRound(frameOf("a"), frameOf(strings.Repeat("x", 2048)), frameOf("c"))
	s.appendGroup(r.msgs)
	r.wait(t)
	if r.seqs[0] != 2 || r.seqs[2] != 3 || r.errs[0] != nil || r.errs[2] != nil {
		t.Fatalf("stored at %v (%v), want 2 and 3", r.seqs, r.errs)
	}
	if r.errs[1] == nil || r.seqs[1] != 0 {
		t.Fatalf("the refused message: stored at %d (%v), want not stored", r.seqs[1], r.errs[1])
	}
	if err := <-lostDone; err == nil {
		t.Fatal("the message whose answer was lost was told stored")
	}
	readsBack(t, s.Stream, "mcpp.pod.lost", 1, frameOf("lost"))
}

// TestWriterDoesNotLingerOnADurableStream: where the history outlives the
// process (--history-dir), a pod's batch does not wait for more of its
// frames: a crash would lose what waits. Each frame goes in the next
// round, and frames a round apart are messages apart; a writer whose
// stream is not its own sends no rounds at all.
func TestWriterDoesNotLingerOnADurableStream(t *testing.T) {
	s := openOwnStream(t, 1<<20, func(c *Config) { c.Temporary = false })
	w := NewWriter(s.Stream, WriterOptions{Node: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer w.Close()
	if w.rounds == nil || w.linger != 0 {
		t.Fatalf("a durable stream of its own: rounds %v, linger %v; want rounds and no linger", w.rounds != nil, w.linger)
	}
	const pod = "mcpp.pod.lab"
	for i := range 3 {
		w.Append(pod, frameOf(fmt.Sprintf("f%d", i)), nil, nil, "")
		deadline := time.Now().Add(10 * time.Second)
		for w.Pending() > 0 { // stored without anyone waiting for it (Sync would hurry it)
			if time.Now().After(deadline) {
				t.Fatalf("frame %d still not stored after 10s", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	messages := 0
	if err := s.Scan(ctx, []string{pod}, 1, func(string, StoredMsg) error { messages++; return nil }); err != nil {
		t.Fatal(err)
	}
	if messages != 3 {
		t.Fatalf("3 frames stored one after another took %d messages, want 3", messages)
	}
	for _, c := range []func(*Config){func(c *Config) { c.Own = false }} {
		other := NewWriter(openOwnStream(t, 1<<20, c).Stream, WriterOptions{Node: "n"})
		defer other.Close()
		if other.rounds != nil {
			t.Fatal("a writer of a stream not its own sends rounds")
		}
	}
	ids := NewWriter(s.Stream, WriterOptions{Node: "n", IDs: true})
	defer ids.Close()
	if ids.rounds != nil {
		t.Fatal("a writer with ids (one batch of a pod on its way at a time) sends rounds")
	}
}
