package pod

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpp/gateway/history"
)

// TestTailPastMeetsLive: a pod's tail hands its pod every message stored
// on its subjects once, in the stream's order: the past, read before
// Follow returns, then what the node's follower brings, including what
// was stored while the past was read (which the follower also brought),
// and nothing of the other pods' subjects.
func TestTailPastMeetsLive(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	store := func(subject string, i int) {
		done := make(chan struct{})
		c.stream.view("writer").Append(subject, []byte(fmt.Sprint(i)), "", func(uint64, bool, error) { close(done) })
		<-done
	}
	for i := range 50 {
		store(Subject("lab"), i)
		store(Subject("other"), i)
	}
	// While the tail reads the past, more is stored: the follower brings
	// it too, and the tail hands it once, after the past.
	var once sync.Once
	c.stream.scanned = func() {
		once.Do(func() {
			for i := 50; i < 60; i++ {
				store(Subject("lab"), i)
			}
		})
	}
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := f.Follow(ctx, "lab", []string{Subject("lab")}, func(subject string, m history.StoredMsg, _ *Burst) {
		mu.Lock()
		got = append(got, string(m.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Stop()
	mu.Lock()
	past := len(got)
	mu.Unlock()
	if past < 50 {
		t.Fatalf("Follow returned with %d of the 50 messages of the past handed", past)
	}
	for i := 60; i < 100; i++ {
		store(Subject("lab"), i)
		store(Subject("other"), i)
	}
	waitFor(t, "the 100 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 100
	})
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 100 {
		t.Fatalf("the tail handed %d messages, want 100: %v", len(got), got)
	}
	for i, s := range got {
		if s != fmt.Sprint(i) {
			t.Fatalf("message %d is %s: out of order, twice, or another pod's", i, s)
		}
	}
	// Stopped, it hands nothing more.
	tl.Stop()
	store(Subject("lab"), 100)
	time.Sleep(50 * time.Millisecond)
	if len(got) != 100 {
		t.Fatal("a stopped tail handed a message")
	}
}

// TestPodClosedWhileReadingItsPast: a pod removed while it reads its past
// (the joiner that opened it gave up: it is idle) does not stay the
// follower's: its tail ends with it, and a pod of the same name opened
// after it is handed what is stored next. Before the fix, the closed pod
// kept its tail, and its live subscription, for nothing.
func TestPodClosedWhileReadingItsPast(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	storePods(c, 0, 1) // a past, which the stream is scanned for
	var once sync.Once
	opened := make(chan *Pod, 1)
	c.stream.scanned = func() {
		// Within the first opening's Follow, once the stream is scanned
		// for its past.
		once.Do(func() { n.RemoveIdle(<-opened) })
	}
	first, e := n.Pod("lab")
	if e != nil {
		t.Fatal(e)
	}
	opened <- first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.WaitReady(ctx); err == nil {
		t.Fatal("a pod closed while it read its past opened")
	}
	n.followMu.Lock()
	f := n.follow
	n.followMu.Unlock()
	f.mu.RLock()
	tl := f.tails[Subject("lab")]
	f.mu.RUnlock()
	if tl != nil {
		t.Fatal("the closed pod's tail is still the follower's")
	}
	second, err := n.readyPod(ctx, "lab")
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("the closed pod was handed again")
	}
}

// storePods stores messages from to to-1 (each its number) on lab and on
// other, in turn, in c's stream, and returns the last one's sequence.
func storePods(c *testCluster, from, to int) uint64 {
	var last uint64
	for i := from; i < to; i++ {
		for _, pod := range []string{"lab", "other"} {
			done := make(chan uint64, 1)
			c.stream.view("writer").Append(Subject(pod), []byte(fmt.Sprint(i)), "", func(seq uint64, _ bool, _ error) { done <- seq })
			last = <-done
		}
	}
	return last
}

// checkPast opens a tail of pod on f, as the pod's opening does, and
// checks the past it was handed: the messages first to last, in order,
// once.
func checkPast(ctx context.Context, t *testing.T, f *Follower, pod string, first, last int) {
	t.Helper()
	var got []string
	tl, err := f.Follow(ctx, pod, []string{Subject(pod), markerSubject(pod)}, func(_ string, m history.StoredMsg, _ *Burst) {
		got = append(got, string(m.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	tl.Stop()
	if len(got) != last-first+1 {
		t.Fatalf("%s's past handed %d messages, want %d (%d to %d)", pod, len(got), last-first+1, first, last)
	}
	for i, s := range got {
		if s != fmt.Sprint(first+i) {
			t.Fatalf("message %d of %s's past is %s, want %d: out of order, twice, or another pod's", i, pod, s, first+i)
		}
	}
}

// startFollower starts n's follower and waits until it has brought what
// storePods stores meanwhile, from from to to-1.
func startFollower(ctx context.Context, t *testing.T, c *testCluster, n *Node, from, to int) *Follower {
	t.Helper()
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := storePods(c, from, to)
	waitFor(t, "the follower to bring them", func() bool { return f.handled.Load() >= last })
	return f
}

// TestPastReadFromWhatTheFollowerBrought: a pod's past is read from what
// the node's follower brought (seqs.go): the stream is scanned only for
// what was stored before the follower started, once for every pod, and
// a pod opening reads the stream by sequence alone, whole, in order,
// passing over what the stream discarded since. Before, every opening
// scanned the stream, which under issue 38's full-size faults (run 46)
// took 14 to 30 s a pod.
func TestPastReadFromWhatTheFollowerBrought(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	var scans atomic.Int64
	c.stream.scanned = func() { scans.Add(1) }
	f := startFollower(ctx, t, c, n, 30, 50)
	broughtUpTo := func(from, to int) {
		last := storePods(c, from, to)
		waitFor(t, "the follower to bring them", func() bool { return f.handled.Load() >= last })
	}

	checkPast(ctx, t, f, "lab", 0, 49)
	checkPast(ctx, t, f, "other", 0, 49)
	if n := scans.Load(); n != 1 {
		t.Fatalf("two pods' openings scanned the stream %d times, want once (for what came before the follower, for both)", n)
	}
	broughtUpTo(50, 60)
	checkPast(ctx, t, f, "lab", 0, 59)
	if n := scans.Load(); n != 1 {
		t.Fatalf("an opening after the first scanned the stream (%d scans in all): it should read what the follower brought", n)
	}
	// The stream keeps 1000+history.Slack messages of a subject: the
	// oldest 60 of lab go, and the janitor has not told the follower yet.
	keep := 1000 + history.Slack
	broughtUpTo(60, keep+60)
	checkPast(ctx, t, f, "lab", 60, keep+59)
	// Once it has, what it knows starts at the stream's first.
	first, err := c.stream.mem.FirstSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n.Tick(time.Now(), first, false)
	checkPast(ctx, t, f, "lab", 60, keep+59)
	// And it holds no more than the stream does: 8 bytes a message held.
	if below, total := f.seqs.count(first); below != 0 || total != 2*keep {
		t.Fatalf("after the janitor's trim the follower records %d sequences, %d of them below the stream's first; want %d, none below", total, below, 2*keep)
	}
	if n := scans.Load(); n != 1 {
		t.Fatalf("the stream was scanned %d times in all, want once", n)
	}
}

// count is how many sequences k records, and how many of them are below
// first.
func (k *subjectSeqs) count(first uint64) (below, total int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range []map[string][]uint64{k.before, k.brought} {
		for _, seqs := range m {
			total += len(seqs)
			i, _ := slices.BinarySearch(seqs, first)
			below += i
		}
	}
	return below, total
}

// recordScans makes c's stream record where each scan of every pod
// (every) and each pod's own scan (own) starts; fail, when set, is where
// the first scan of every pod ends short.
func recordScans(c *testCluster, fail uint64) (every, own func() []uint64) {
	var mu sync.Mutex
	var e, o []uint64
	c.stream.scanning = func(subjects []string, from uint64, fn func(string, history.StoredMsg) error) func(string, history.StoredMsg) error {
		mu.Lock()
		defer mu.Unlock()
		if subjects[0] != StreamSubjects {
			o = append(o, from)
			return fn
		}
		e = append(e, from)
		if len(e) > 1 || fail == 0 {
			return fn
		}
		return func(s string, m history.StoredMsg) error {
			if m.Seq >= fail {
				return errors.New("the stream's leader is gone")
			}
			return fn(s, m)
		}
	}
	read := func(l *[]uint64) func() []uint64 {
		return func() []uint64 {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(*l)
		}
	}
	return read(&e), read(&o)
}

// TestPastReadWhenTheScanOfEveryPodEndsShort: a pod that opens while
// the node's scan of every pod (what the stream held before its
// follower started) is under way waits for it; when that scan ends short
// (the stream's leader gone), it is taken up where it stopped, and the
// pod's past is whole and in order; no pod scans its own subjects.
func TestPastReadWhenTheScanOfEveryPodEndsShort(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	f := startFollower(ctx, t, c, n, 30, 50)
	// The first scan of every pod ends at its 31st message (15 of each
	// pod read).
	every, own := recordScans(c, 31)
	checkPast(ctx, t, f, "lab", 0, 49)
	checkPast(ctx, t, f, "other", 0, 49)
	if o := own(); len(o) != 0 {
		t.Fatalf("the pods scanned their own subjects from %v", o)
	}
	if e := every(); !slices.Equal(e, []uint64{1, 31}) {
		t.Fatalf("the scans of every pod started at %v, want 1 and then 31 (where the first stopped)", e)
	}
}

// expectOneScanOfEveryPod fails unless the stream was scanned once for
// every pod, from 1, and never for one pod's own subjects (recordScans).
func expectOneScanOfEveryPod(t *testing.T, every, own func() []uint64, when string) {
	t.Helper()
	if o, e := own(), every(); len(o) != 0 || !slices.Equal(e, []uint64{1}) {
		t.Fatalf("%s: scans of every pod from %v (want one, from 1) and of own subjects from %v", when, e, o)
	}
}

// TestPastReadBeforeTheFollowerBringsAnything: on a node just started
// whose stream is idle (a cluster restarted at night, its members
// dialling back), the follower brings nothing for as long as no one
// sends; the pods that open meanwhile still wait for the one scan of
// every pod, not scan their own subjects each. Before, an opening
// scanned its own subject until the follower's first message: a
// thousand such scans are what kept a node from opening any pod in 30 s
// (issue 38's full-size run 50).
func TestPastReadBeforeTheFollowerBringsAnything(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	every, own := recordScans(c, 0)
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPast(ctx, t, f, "lab", 0, 29)
	checkPast(ctx, t, f, "other", 0, 29)
	expectOneScanOfEveryPod(t, every, own, "two pods opened before the follower brought anything")
	// What comes next is brought, and read from there.
	last := storePods(c, 30, 40)
	waitFor(t, "the follower to bring them", func() bool { return f.handled.Load() >= last })
	checkPast(ctx, t, f, "lab", 0, 39)
	expectOneScanOfEveryPod(t, every, own, "after the follower brought messages")
}

// readItsPast reports whether n, told to follow now, has a follower
// whose scan of every pod has ended (Node.ReadingPast).
func readItsPast(n *Node) bool {
	reading, _, _ := n.ReadingPast()
	return !reading
}

// TestFollowNowScansBeforeAnyPodOpens: a node told to follow now (the
// gateway does, once its history stream is open) starts its follower and
// the scan of every pod before any pod opens there, so that a node just
// started again whose members went elsewhere has read the stream by the
// time a client dials it. Before, the scan started with the first
// opening: in issue 38's full-size run 67, node 1, killed and started
// again just before the checker read the histories there, had not
// finished it within the reader's 10 s dial.
func TestFollowNowScansBeforeAnyPodOpens(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	every, own := recordScans(c, 0)
	n.FollowNow(ctx)
	waitFor(t, "the scan of every pod, with no pod open", func() bool { return readItsPast(n) })
	expectOneScanOfEveryPod(t, every, own, "with no pod open")
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPast(ctx, t, f, "lab", 0, 29)
	expectOneScanOfEveryPod(t, every, own, "a pod's opening after the scan")
}

// TestFollowerStartedAgainTakesOnWhatTheLastKnew: when the node gives its
// follower up (behind, or cut off: its pods lost their order), the next
// one takes on the sequences the last one knew, up to the last message
// it handled, and the scan of every pod reads only what came after; the
// pods' pasts are whole and in order.
func TestFollowerStartedAgainTakesOnWhatTheLastKnew(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	first := startFollower(ctx, t, c, n, 30, 50)
	checkPast(ctx, t, first, "lab", 0, 49)

	n.followMu.Lock()
	n.giveUpFollowerLocked()
	n.followMu.Unlock()
	storePods(c, 50, 60) // stored while the node has no follower
	every, own := recordScans(c, 0)
	second := startFollower(ctx, t, c, n, 60, 70)
	if second == first {
		t.Fatal("the follower given up was not made anew")
	}
	checkPast(ctx, t, second, "lab", 0, 69)
	checkPast(ctx, t, second, "other", 0, 69)
	// 100 is the last message the first follower handled (other's 49th).
	if e, o := every(), own(); !slices.Equal(e, []uint64{101}) || len(o) != 0 {
		t.Fatalf("the scans of every pod started at %v and the pods' own at %v; want one scan of every pod, from 101, and none of their own", e, o)
	}
}

// TestReadingPastUntilTheScanEnds: a node told to follow now is reading
// its past (the gateway's /healthz says it is not ready) from then until
// its scan of every pod has ended, and says how far it is; a scan given
// up with its follower (cut off, or behind) is taken up by a new one
// with no pod opening, so that the node does not stay unready. Before, a
// node's /healthz said ok the moment its stream was open, and a load
// balancer sent it clients whose dials ran out while it read (issue 38's
// full-size runs 67 and 69).
func TestReadingPastUntilTheScanEnds(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last := storePods(c, 0, 30)
	if reading, _, _ := n.ReadingPast(); reading {
		t.Fatal("a node not told to follow now says it is reading its past")
	}
	held, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var scans []uint64
	c.stream.scanning = func(subjects []string, from uint64, fn func(string, history.StoredMsg) error) func(string, history.StoredMsg) error {
		mu.Lock()
		defer mu.Unlock()
		scans = append(scans, from)
		if len(scans) > 1 {
			return fn
		}
		return func(s string, m history.StoredMsg) error {
			if m.Seq == 10 {
				close(held)
				<-release
				return errors.New("the follower was given up")
			}
			return fn(s, m)
		}
	}
	n.FollowNow(ctx)
	<-held
	if reading, next, from := n.ReadingPast(); !reading || next != 10 || from != last+1 {
		t.Fatalf("mid-scan: reading %v at %d of %d; want reading at 10 of %d", reading, next, from, last+1)
	}
	n.followMu.Lock()
	n.giveUpFollowerLocked()
	n.followMu.Unlock()
	close(release)
	waitFor(t, "the node to have read its past, with no pod open", func() bool { return readItsPast(n) })
	mu.Lock()
	got := slices.Clone(scans)
	mu.Unlock()
	if !slices.Equal(got, []uint64{1, 1}) {
		t.Fatalf("the scans of every pod started at %v; want the first given up, and a second from 1", got)
	}
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkPast(ctx, t, f, "lab", 0, 29)
}

// TestFollowerGivenUpIsMadeAnewAtOnce: on a node told to follow now, a
// follower given up (the node cut off from a quorum for 10 s, or behind
// for 30 s) is made anew at once, not at the next pod's opening, but not
// while the node is still cut off; meanwhile the node is not ready. Before,
// a node whose routes came back said it was ready while its next pod's
// opening still had to make a follower, and joins there waited
// (TestClusterFaultsOneByOne's "without quorum" in the README's test
// command, RELIABILITY.md's "Seen, and left").
func TestFollowerGivenUpIsMadeAnewAtOnce(t *testing.T) {
	c := newTestCluster(t, 1)
	n := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	storePods(c, 0, 30)
	n.FollowNow(ctx)
	ready := func() bool { return readItsPast(n) }
	waitFor(t, "the node to have read its past", ready)
	n.followMu.Lock()
	first := n.follow
	n.followMu.Unlock()

	// Cut off: given up, and not made anew while cut off.
	n.cutSince.Store(time.Now().UnixNano())
	n.followMu.Lock()
	n.giveUpFollowerLocked()
	n.followMu.Unlock()
	if ready() {
		t.Fatal("the node says it is ready with its follower given up")
	}
	time.Sleep(3 * followRetry)
	n.followMu.Lock()
	made := n.follow
	n.followMu.Unlock()
	if made != nil {
		t.Fatal("a follower was made while the node was cut off")
	}
	// Its quorum back, a new one is made with no pod opening.
	n.cutSince.Store(0)
	storePods(c, 30, 40) // stored while it had none
	waitFor(t, "a new follower whose scan has ended", ready)
	f, err := n.follower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f == first {
		t.Fatal("the follower given up is still the node's")
	}
	checkPast(ctx, t, f, "lab", 0, 39)
	checkPast(ctx, t, f, "other", 0, 39)
}
