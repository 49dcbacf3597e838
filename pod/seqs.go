package pod

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcpp/gateway/history"
)

// subjectSeqs is what the node's follower has brought of each subject of
// the history stream, and what the stream held before it started: the
// sequences, in order. A pod that opens reads its past by them, from the
// node's cache of the stream's messages (history.Cache) and, for what the
// cache no longer holds, by sequence from the stream. What the stream
// held before the follower started is scanned once for every pod, in the
// stream's order (scanFrom), not once for each, and the openings wait
// for it.
//
// Why: every pod's messages lie in every block of the stream that all
// pods share, so scanning one pod's past reads through the whole stream.
// Under issue 38's full-size faults (run 46) a thousand pods opened on
// nodes whose cache held their messages, each scanning the stream: they
// took 14 to 30 s, their joiners' dials ran out the client's 10 s and
// went to the next node, and the pods there opened too, for nothing.
//
// It costs 8 bytes a message the stream holds (the janitor drops what
// the stream discarded: trim), and a map entry per subject.
type subjectSeqs struct {
	mu sync.Mutex
	// from is the first sequence the follower brings (start). It brings
	// every message from there on, in order, once: its consumer never
	// skips one (history.Stream.Follow). brought is what it brought, by
	// subject.
	from    uint64
	brought map[string][]uint64
	// before is what the scan of every pod found before scanNext, by
	// subject: all there is below scanNext (or what the follower given
	// up before this one knew: inherit). whole: the scan reached from.
	before   map[string][]uint64
	scanNext uint64
	whole    bool
	// scanning is closed when the scan under way ends (nil: none is);
	// short counts the scans that ended short, for the log.
	scanning chan struct{}
	short    int
}

// inherit takes on what old, the node's follower given up, knew up to
// last, the last sequence it handled (0: none): all of it, when its scan
// of every pod had ended (whole), for it brought every message from its
// first on, in order. The scan of every pod then reads only what came
// after last. It is called before start.
func (k *subjectSeqs) inherit(old *subjectSeqs, last uint64) {
	old.mu.Lock()
	defer old.mu.Unlock()
	if !old.whole {
		return
	}
	// It knew everything below its first, whatever it handled since.
	last = max(last, old.from-1)
	known := make(map[string][]uint64, len(old.before)+len(old.brought))
	for s, seqs := range old.before {
		known[s] = slices.Clone(seqs)
	}
	for s, seqs := range old.brought {
		i, _ := slices.BinarySearch(seqs, last+1)
		known[s] = append(known[s], seqs[:i]...)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.before, k.scanNext = known, last+1
}

// start records from, the first sequence the follower brings
// (history.Backend.Follow): what is below it is the scan of every pod's,
// unless already known (inherit).
func (k *subjectSeqs) start(from uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.from = from
	if k.before == nil { // nothing inherited
		k.before, k.scanNext = map[string][]uint64{}, 1
	}
	if k.scanNext >= from {
		// Known past where this follower starts: what it brings is not
		// known already.
		for s, seqs := range k.before {
			i, _ := slices.BinarySearch(seqs, from)
			k.before[s] = seqs[:i]
		}
		k.scanNext, k.whole = from, true
	}
}

// add records that the follower brought seq, stored on subject (maybe
// before start has been called: the follower hands messages on from the
// moment it is made).
func (k *subjectSeqs) add(subject string, seq uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.brought == nil {
		k.brought = map[string][]uint64{}
	}
	k.brought[subject] = insertSeq(k.brought[subject], seq)
}

// insertSeq adds seq to the ascending seqs, once.
func insertSeq(seqs []uint64, seq uint64) []uint64 {
	if n := len(seqs); n == 0 || seqs[n-1] < seq {
		return append(seqs, seq)
	}
	// Out of order: only a backend in the process (history.Memory) tells
	// its followers from the goroutines that appended.
	i, found := slices.BinarySearch(seqs, seq)
	if found {
		return seqs
	}
	return slices.Insert(seqs, i, seq)
}

// snapshot is what is known of subjects: what the scan of every pod
// found before the follower's first sequence (before), and what the
// follower brought (brought).
func (k *subjectSeqs) snapshot(subjects []string) (before, brought [][]uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	before, brought = make([][]uint64, len(subjects)), make([][]uint64, len(subjects))
	for i, s := range subjects {
		before[i] = slices.Clone(k.before[s])
		brought[i] = slices.Clone(k.brought[s])
	}
	return before, brought
}

// trim drops the sequences below first, which the stream discarded
// (--history-bytes, --history-age), and the subjects left with none.
func (k *subjectSeqs) trim(first uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range []map[string][]uint64{k.before, k.brought} {
		for s, seqs := range m {
			i, _ := slices.BinarySearch(seqs, first)
			switch {
			case i == len(seqs):
				delete(m, s)
			case i > 0:
				m[s] = slices.Clone(seqs[i:])
			}
		}
	}
}

// errScanned ends a scan at the follower's first sequence.
var errScanned = errors.New("pod: scanned up to what the follower brought")

// scanRetry is the pause before a scan of every pod that ended short
// (its read of the stream unanswered: the stream's leader gone, a node
// cut off) is taken up again where it stopped.
const scanRetry = 100 * time.Millisecond

// readPast calls fn, in the stream's order, with every message the
// stream holds on subjects up to what the follower has brought, by
// sequence (readSeqs): what the scan of every pod found, then what the
// follower brought.
func (f *Follower) readPast(ctx context.Context, subjects []string, fn func(subject string, m history.StoredMsg)) error {
	if err := f.scanBefore(ctx); err != nil {
		return err
	}
	before, brought := f.seqs.snapshot(subjects)
	if err := f.readSeqs(ctx, subjects, before, fn); err != nil {
		return err
	}
	return f.readSeqs(ctx, subjects, brought, fn)
}

// scanBefore waits until the scan of every pod has reached the
// follower's first sequence, starting it unless it is under way, and
// taking it up again where it stopped when it ends short. The openings
// wait for it rather than scan their own subjects: a thousand such
// scans on a node just started were what kept it from opening any pod
// within 30 s (issue 38's full-size run 50), where one scan of the
// stream in its order reads each message once.
func (f *Follower) scanBefore(ctx context.Context) error {
	k := &f.seqs
	for {
		k.mu.Lock()
		if k.whole {
			k.mu.Unlock()
			return nil
		}
		if err := f.scanCtx.Err(); err != nil {
			// The follower was closed (the node stops, or gave it up):
			// its scan will not be taken up again.
			k.mu.Unlock()
			return fmt.Errorf("pod: the node's follower is closed: %w", err)
		}
		done := k.scanning
		if done == nil {
			done = make(chan struct{})
			k.scanning = done
			go f.scanFrom(done)
		}
		k.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
		whole := k.whole
		k.mu.Unlock()
		if whole {
			return nil
		}
		select {
		case <-time.After(scanRetry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// scanFrom scans the stream, from where an earlier scan stopped up to
// the follower's first sequence, for the sequences of every subject;
// what it read goes into the node's cache too (history.Stream.Scan). Its
// context has no deadline, so that each of its reads waits for the
// stream's answer as long as a read without one (a few seconds), and a
// read unanswered ends it short rather than hold every opening.
func (f *Follower) scanFrom(done chan struct{}) {
	k := &f.seqs
	k.mu.Lock()
	from, next := k.from, k.scanNext
	k.mu.Unlock()
	began, read := time.Now(), 0
	err := f.n.History.Scan(f.scanCtx, []string{StreamSubjects}, next, func(subject string, m history.StoredMsg) error {
		if m.Seq >= from {
			return errScanned
		}
		read++
		k.mu.Lock()
		k.before[subject] = append(k.before[subject], m.Seq)
		k.scanNext = m.Seq + 1
		k.mu.Unlock()
		return nil
	})
	if errors.Is(err, errScanned) {
		err = nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.whole, k.scanning = err == nil, nil
	close(done)
	if err == nil {
		// How long a node just started waits before it opens a pod.
		f.log.Info("the node read what the history stream held before its follower started",
			"messages", read, "from", next, "took", time.Since(began).Round(time.Millisecond).String())
	}
	if err != nil && f.scanCtx.Err() == nil {
		if k.short++; k.short == 1 || k.short%100 == 0 {
			f.log.Warn("the node's scan of what the history stream held before its follower started ended short; the pods opening wait for it to go on",
				"times", k.short, "err", err, "next", k.scanNext, "follower_from", from)
		}
	}
}

// readChunk is how many messages readSeqs reads before it hands them on:
// what it holds at once.
const readChunk = 64

// readSeqs calls fn, in the stream's order, with the messages at seqs[i]
// on subjects[i], read with history.Backend.Read (the node's cache, then
// the stream). A sequence the stream no longer holds (discarded since by
// a limit) is passed over, as a scan would.
func (f *Follower) readSeqs(ctx context.Context, subjects []string, seqs [][]uint64, fn func(subject string, m history.StoredMsg)) error {
	pos := make([]int, len(subjects))
	type wanted struct {
		seq uint64
		i   int
	}
	var chunk []wanted
	want := make([][]uint64, len(subjects))
	got := make([]map[uint64]history.StoredMsg, len(subjects))
	for i := range got {
		got[i] = map[uint64]history.StoredMsg{}
	}
	for {
		// The next readChunk sequences, in the stream's order.
		chunk = chunk[:0]
		for len(chunk) < readChunk {
			low := -1
			for i := range subjects {
				if pos[i] < len(seqs[i]) && (low < 0 || seqs[i][pos[i]] < seqs[low][pos[low]]) {
					low = i
				}
			}
			if low < 0 {
				break
			}
			chunk = append(chunk, wanted{seqs[low][pos[low]], low})
			pos[low]++
		}
		if len(chunk) == 0 {
			return nil
		}
		for i := range want {
			want[i] = want[i][:0]
			clear(got[i])
		}
		for _, w := range chunk {
			want[w.i] = append(want[w.i], w.seq)
		}
		for i, subject := range subjects {
			rest := want[i]
			for len(rest) > 0 {
				err := f.n.History.Read(ctx, subject, rest, func(m history.StoredMsg) error {
					got[i][m.Seq] = m
					return nil
				})
				var missing *history.MissingError
				if !errors.As(err, &missing) {
					if err != nil {
						return err
					}
					break
				}
				// Read what follows the one that is gone.
				j, _ := slices.BinarySearch(rest, missing.Seq+1)
				rest = rest[j:]
			}
		}
		for _, w := range chunk {
			if m, ok := got[w.i][w.seq]; ok {
				fn(subjects[w.i], m)
			}
		}
	}
}

// followRetry is the pause before the node tries again to start a
// follower the stream did not answer for (a cluster still electing, a
// node cut off), or to read the stream's past with a new one (the last
// was given up before its scan ended), and followWait how long it waits
// for that answer.
const (
	followRetry = time.Second
	followWait  = 10 * time.Second
)

// FollowNow starts the node's follower of the history stream, and its
// scan of what the stream held before it, now rather than when the first
// pod opens here, so that a node started again whose members went
// elsewhere meanwhile has read the stream by the time a client dials it
// (issue 38's full-size run 67: a node killed and started again just
// before the checker read the histories there began its scan only with
// the checker's first dial, and had not ended it within the dial's 10 s).
// From then on, a follower the node gives up (cut off from a quorum, or
// behind) is made anew at once, not at the next pod's opening; while the
// node has none whose scan has ended, it is not ready (ReadingPast). It
// returns at once.
func (n *Node) FollowNow(ctx context.Context) {
	n.followMu.Lock()
	n.followCtx = ctx
	n.followMu.Unlock()
	go n.followUntilRead(ctx)
}

// followUntilRead makes the node's follower, unless it has one, and
// waits for its scan of every pod; it tries again every followRetry until
// that scan ends, or ctx ends, or the node stops. A scan that fails was
// given up with its follower: the next one takes it up. While the node
// is cut off from a quorum it makes none, for its pods would lose their
// order at once (checkFollower) and the follower be given up again.
func (n *Node) followUntilRead(ctx context.Context) {
	for {
		if n.cutSince.Load() == 0 {
			fctx, cancel := context.WithTimeout(ctx, followWait)
			f, err := n.follower(fctx)
			cancel()
			if err == nil && f.scanBefore(ctx) == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		case <-time.After(followRetry):
		}
	}
}

// ReadingPast reports whether the node, told to FollowNow, has no
// follower of the history stream whose scan of what the stream held
// before it has ended: it opens no pod meanwhile, so the gateway's
// /healthz says it is not ready, and a load balancer sends its clients
// elsewhere (issue 38's full-size runs: a node started again read
// 300,000 messages in 23.5 s under load, and its clients' dials ran out
// waiting). next is the sequence the scan reads next, and from where it
// stops (0: no follower is started yet).
func (n *Node) ReadingPast() (reading bool, next, from uint64) {
	n.followMu.Lock()
	f, wanted := n.follow, n.followCtx != nil
	n.followMu.Unlock()
	if !wanted {
		return false, 0, 0
	}
	if f == nil {
		return true, 0, 0
	}
	f.seqs.mu.Lock()
	defer f.seqs.mu.Unlock()
	return !f.seqs.whole, f.seqs.scanNext, f.seqs.from
}
