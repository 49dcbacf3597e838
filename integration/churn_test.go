package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpp "github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// liveHeap is the heap the last of two collections found live (the
// second empties what sync.Pools kept through the first). It is what the
// collection marked, not HeapAlloc: HeapAlloc adds what was allocated
// since the collection ended, and a flood under way allocates tens of
// MiB of garbage in the moment a loaded machine takes to read it.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// watchHeap samples the live heap every interval until the function it
// returns is called, which returns the highest sample (at least base).
// A sample is the smallest of three collections in a row: a collection
// counts as live what was allocated while it ran, which during a flood on
// a loaded machine is several MiB of envelopes already dropped, while
// what the gateway holds stays through all three.
func watchHeap(base uint64, every time.Duration) (stop func() uint64) {
	var peak atomic.Uint64
	peak.Store(base)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			h := liveHeap()
			for range 2 {
				h = min(h, liveHeap())
			}
			if h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// openFDs is the number of file descriptors the process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	return countFDs(t, "/proc/self/fd")
}

// countFDs counts the entries of a /proc/PID/fd directory.
func countFDs(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("counting open descriptors: %v", err)
	}
	return len(entries)
}

// churnCaster broadcasts numbered envelopes until stopped.
type churnCaster struct {
	stop chan struct{}
	sent chan int
	err  atomic.Value
}

func startCaster(conn *mcpp.Conn, first int) *churnCaster {
	c := &churnCaster{stop: make(chan struct{}), sent: make(chan int, 1)}
	go func() {
		n := first
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		defer func() { c.sent <- n }()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := conn.Write(ctx, fmt.Appendf(nil, `{"id":"c-%d","kind":"chat","payload":{"seq":%d}}`, n, n))
			cancel()
			if err != nil {
				c.err.Store(err)
				return
			}
			n++
		}
	}()
	return c
}

// halt stops the caster and returns the number of envelopes sent so far
// (the next seq).
func (c *churnCaster) halt(t *testing.T) int {
	t.Helper()
	close(c.stop)
	n := <-c.sent
	if err, _ := c.err.Load().(error); err != nil {
		t.Fatalf("broadcaster: %v", err)
	}
	return n
}

// churnChecker reads the steady participant's messages as they come and
// checks the broadcast's order, keeping none of them.
type churnChecker struct {
	mu       sync.Mutex
	next     int // next seq expected from the caster
	fail     string
	presence int
	// fromChurn counts the envelopes of churner i ("churn-env-i"); it is
	// allocated before the baseline so that the heap it takes is not
	// counted as growth.
	fromChurn []uint8
	other     int // chat envelopes not from a churner
}

func (k *churnChecker) run(p *harness.Peer) {
	for b := range p.Msgs {
		m, err := harness.DecodeWire(b)
		k.mu.Lock()
		switch {
		case err != nil:
			if k.fail == "" {
				k.fail = fmt.Sprintf("not an envelope: %v %.200q", err, b)
			}
		case m.Kind == "system/presence":
			k.presence++
		case m.From == "caster":
			if s := m.Seq(); s != k.next && k.fail == "" {
				k.fail = fmt.Sprintf("broadcast %s has seq %d, want %d", m.ID, s, k.next)
			}
			k.next++
		case m.Kind == "chat":
			var i int
			if _, err := fmt.Sscanf(m.ID, "churn-env-%d", &i); err == nil && i >= 0 && i < len(k.fromChurn) {
				k.fromChurn[i]++
			} else {
				k.other++
			}
		default:
			if k.fail == "" {
				k.fail = fmt.Sprintf("unexpected %s from %s", m.Kind, m.From)
			}
		}
		k.mu.Unlock()
	}
}

func (k *churnChecker) state() (next int, fail string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.next, k.fail
}

// churn runs n connections through the gateway with workers at a time.
// Each joins (three in four the broadcast pod, one in four one of 16
// short-lived pods), waits for its welcome and leaves, with a closing
// handshake or by dropping the TCP connection, alternately. One in ten of
// those in the broadcast pod sends an envelope first and waits for its
// echo, so that the steady participant must get it; talked[i] records
// that connection i did. A closing handshake the gateway does not answer
// fails the test, but the churn goes on.
func churn(t *testing.T, g *harness.Gateway, pod string, from, n, workers int, talked []bool) {
	t.Helper()
	var (
		badCloses     atomic.Int64
		firstBadClose error
		next          atomic.Int64
		mu            sync.Mutex
		errs          = make(chan error, workers)
		wg            sync.WaitGroup
		cancel        = make(chan struct{})
	)
	next.Store(int64(from))
	one := func(i int) error {
		q := url.Values{"participant": {fmt.Sprintf("churn-%d", i)}, "pod": {pod}}
		talk := false
		switch {
		case i%4 == 3:
			q.Set("pod", fmt.Sprintf("%s-eph-%d", pod, i%16))
		case i%10 == 0:
			talk = true
			q.Set("echo", "1")
		}
		conn, err := harness.DialConn(g.WS, q, nil)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		defer conn.CloseNow()
		ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		b, err := conn.Read(ctx, nil)
		if err != nil {
			return fmt.Errorf("connection %d: welcome: %w", i, err)
		}
		if m, err := harness.DecodeWire(b); err != nil || m.Kind != "system/welcome" {
			return fmt.Errorf("connection %d: first message %.100q", i, b)
		}
		if talk {
			id := fmt.Sprintf("churn-env-%d", i)
			if err := conn.Write(ctx, fmt.Appendf(nil, `{"id":%q,"kind":"chat"}`, id)); err != nil {
				return fmt.Errorf("connection %d: write: %w", i, err)
			}
			for {
				b, err := conn.Read(ctx, nil)
				if err != nil {
					return fmt.Errorf("connection %d: waiting for its echo: %w", i, err)
				}
				if m, _ := harness.DecodeWire(b); m.ID == id {
					break
				}
			}
			talked[i] = true
		}
		if i%2 == 0 {
			return conn.CloseNow()
		}
		// A closing handshake; the broadcasts that arrive meanwhile are
		// read and dropped by Close. A gateway that does not answer the
		// close frame is counted (TestFaultCloseHandshake is about it),
		// and the churn goes on so that its figures are still measured.
		if err := conn.Close(); err != nil {
			badCloses.Add(1)
			mu.Lock()
			if firstBadClose == nil {
				firstBadClose = fmt.Errorf("connection %d: %w", i, err)
			}
			mu.Unlock()
		}
		return nil
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-cancel:
					return
				default:
				}
				i := int(next.Add(1) - 1)
				if i >= from+n {
					return
				}
				if err := one(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errs:
		close(cancel)
		<-done
		t.Fatal(err)
	case <-time.After(3 * time.Minute): // a hang, not a speed limit
		close(cancel)
		<-done
		t.Fatalf("churn: %d of %d connections after 3 minutes", next.Load()-int64(from), n)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if k := badCloses.Load(); k > 0 {
		t.Errorf("churn: %d of %d closing handshakes got no close frame from the gateway; first: %v", k, n/2, firstBadClose)
	}
}

// TestChurn: 10,000 connections come and go (joins, welcomes, leaves,
// short-lived pods) at hundreds a second while one participant broadcasts;
// a steady participant gets every broadcast in order and every envelope a
// churner sent, exactly once. Afterwards the process has as many
// goroutines as before (a small fixed slack) and its heap is within 10%
// of what it was after a first warm-up batch, the connections and pods
// are gone, and the gateway still serves.
//
// Not parallel: it counts the goroutines and heap of the whole process.
func TestChurn(t *testing.T) {
	const (
		pod     = "churn"
		warmup  = 1000
		total   = 10000
		workers = 8
		slack   = 10 // goroutines
	)
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.Rate, c.Burst = 1e6, 1000000
		c.SendQueue = 1 << 14
		c.WriteTimeout = time.Minute
		// The history (in memory) is full after the warm-up, so that what
		// it holds does not grow between the two measures: it is bounded
		// by --history, which is not what this test is about.
		c.History = 20
		// The harness keeps the gateway's log in this process, whose heap
		// is measured: at debug level a line per presence change would
		// count (4 MiB for the churn's 40,000).
		c.Logger = slog.New(infoAndAbove{c.Logger.Handler()})
	})
	steady := harness.DialPeer(t, g, pod, "steady", "", 1<<14)
	casterConn, err := harness.DialConn(g.WS, url.Values{"pod": {pod}, "participant": {"caster"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	caster := harness.NewPeer(t, "caster", casterConn, 0)
	go caster.ReadLoop()
	t.Cleanup(func() { _ = casterConn.CloseNow() })
	check := &churnChecker{fromChurn: make([]uint8, warmup+total)}
	talked := make([]bool, warmup+total)
	go check.run(steady)

	settle := func(what string, sent int) {
		t.Helper()
		harness.Eventually(t, 30*time.Second, what+": steady has every broadcast", func() bool {
			next, fail := check.state()
			if fail != "" {
				t.Fatalf("steady: %s", fail)
			}
			return next == sent
		})
		harness.Eventually(t, 30*time.Second, what+": only steady and caster connected, one pod", func() bool {
			m := harness.MetricsOf(t, g.URL)
			return m["mcpp_connections"] == 2 && m["mcpp_pods"] == 1
		})
	}

	// Warm-up: the first connections of every kind, so that one-off
	// allocations (pools, NATS subject caches, the runtime's goroutine
	// list) are made before the baseline.
	bc := startCaster(casterConn, 0)
	churn(t, g, pod, 0, warmup, workers, talked)
	sent := bc.halt(t)
	settle("warm-up", sent)
	goroutines0 := runtime.NumGoroutine()
	heap0 := liveHeap()
	hist0 := harness.Metric(t, g.URL, "mcpp_history_bytes")
	cache0 := harness.Metric(t, g.URL, "mcpp_history_cache_bytes")
	fds0 := openFDs(t)

	start := time.Now()
	bc = startCaster(casterConn, sent)
	churn(t, g, pod, warmup, total, workers, talked)
	sent = bc.halt(t)
	elapsed := time.Since(start)
	settle("churn", sent)

	var goroutines1 int
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("goroutines back to %d (+%d)", goroutines0, slack), func() bool {
		goroutines1 = runtime.NumGoroutine()
		return goroutines1 <= goroutines0+slack
	})
	// The heap is measured until it is back within 10%, for up to 30s,
	// not counting what the pods' history (in memory) came to hold
	// meanwhile: it is bounded by --history and --history-bytes, and a
	// stored entry costs the in-memory store about 2.3 times its bytes
	// (measured: its structures, and the subject of each entry). The
	// node's cache of history messages, which the replays fill, is
	// bounded by --history-cache and counted as it grew.
	histGrowth := 2.5*(harness.Metric(t, g.URL, "mcpp_history_bytes")-hist0) +
		harness.Metric(t, g.URL, "mcpp_history_cache_bytes") - cache0
	var heap1 uint64
	within := func() bool { return float64(heap1)-histGrowth <= 1.10*float64(heap0) }
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		heap1 = liveHeap()
		if within() || time.Now().After(deadline) {
			break
		}
	}
	if !within() {
		t.Errorf("heap in use %.2f MiB after the churn, %.2f MiB before, of which the history's growth accounts for %.2f MiB: %+.1f%% besides, over 10%%",
			float64(heap1)/(1<<20), float64(heap0)/(1<<20), histGrowth/(1<<20), 100*((float64(heap1)-histGrowth)/float64(heap0)-1))
	}

	// Every connection's socket is closed: a gateway that forgets to close
	// the connections that ended without a closing handshake keeps their
	// descriptors (and, through them, their memory) forever.
	fds1 := openFDs(t)
	for deadline := time.Now().Add(10 * time.Second); fds1 > fds0+slack && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		fds1 = openFDs(t)
	}
	if fds1 > fds0+slack {
		t.Errorf("open file descriptors: %d before the churn, %d after", fds0, fds1)
	}

	// Every churner's envelope reached steady exactly once.
	check.mu.Lock()
	talkers := 0
	for i, sent := range talked {
		want := uint8(0)
		if sent {
			want = 1
			talkers++
		}
		if check.fromChurn[i] != want {
			t.Errorf("steady got churner %d's envelope %d times, want %d", i, check.fromChurn[i], want)
		}
	}
	if check.other != 0 {
		t.Errorf("steady got %d envelopes from nobody it knows", check.other)
	}
	presence := check.presence
	check.mu.Unlock()

	// The gateway still serves the pod.
	late := g.Dial(t, pod, "late", "")
	late.Send(map[string]any{"id": "after-churn", "kind": "chat"})
	harness.Eventually(t, 10*time.Second, "steady gets the envelope after the churn", func() bool {
		check.mu.Lock()
		defer check.mu.Unlock()
		return check.other == 1
	})

	t.Logf("churn: %d connections in %v (%.0f/s, %d workers) after %d warm-up ones; steady got all %d broadcasts in order, %d churner envelopes, %d presence events",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), workers, warmup, sent, talkers, presence)
	t.Logf("goroutines: %d before, %d after; heap in use: %.2f MiB before, %.2f MiB after (%+.1f%%, %+.1f%% besides the history's %.2f MiB); open descriptors: %d before, %d after",
		goroutines0, goroutines1, float64(heap0)/(1<<20), float64(heap1)/(1<<20), 100*(float64(heap1)/float64(heap0)-1),
		100*((float64(heap1)-histGrowth)/float64(heap0)-1), histGrowth/(1<<20), fds0, fds1)
}

// infoAndAbove is a log handler that leaves out debug lines.
type infoAndAbove struct{ slog.Handler }

func (h infoAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}

func (h infoAndAbove) WithAttrs(a []slog.Attr) slog.Handler {
	return infoAndAbove{h.Handler.WithAttrs(a)}
}

func (h infoAndAbove) WithGroup(name string) slog.Handler {
	return infoAndAbove{h.Handler.WithGroup(name)}
}
