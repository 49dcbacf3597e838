package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/client"
)

// podsLoad is --pods: many small pods, as a gateway that serves agents
// holds them (issue 21): each of Members participants, one of whom sends
// Rate envelopes a second, the others receiving. It measures whether
// every join is admitted, what a pod costs the server's memory with its
// connections, the latency of delivery, the server's CPU time a delivery,
// and what went missing. The same run drives the gateway or nats-server:
// only Transport, how a member joins, sends and receives, differs.
type podsLoad struct {
	Pods     int
	Members  int
	Rate     float64       // envelopes a second per pod
	Duration time.Duration // the measurement window
	Size     int
	Dialers  int           // joins under way at once
	Settle   time.Duration // after the last join, before the joined RSS and the window
	Drain    time.Duration // after the window, the longest wait for what is on its way
	// Transport is how members join: the gateway's client, or nats.go.
	Transport podTransport
	PIDs      []int // the server processes to watch (none: a server bench did not start)
}

// podTransport is how a member of a --pods run joins its pod.
type podTransport interface {
	// join connects member of pod (conn numbers the connection in the
	// run, from 0); what the member then receives goes to m.receive,
	// and the end of its connection to m.ended.
	join(ctx context.Context, pod, member, conn int, m *podMember) (podConn, error)
	// nodes is how many servers the members are spread over.
	nodes() int
}

// podConn is one member's connection.
type podConn interface {
	send(ctx context.Context, envelope []byte) error
	close()
}

// podsResult is what a --pods run measured.
type podsResult struct {
	Joins, Admitted int
	Refusals        map[string]int
	FirstError      string // the first join that failed otherwise than refused, if one did
	// RSS of the server processes, all together: before any join, once
	// every member joined, and at the end of the traffic.
	RSSBefore, RSSJoined, RSSEnd int64
	Sent, Expected, Received     int64
	Lost, Twice, OutOfOrder      int64
	Cut                          int64 // connections that ended before the run did
	Latency                      *histogram
	JoinTime                     time.Duration
	// The window: when the senders started and stopped. CPU is the
	// server processes' CPU time in it and Bench this process's (the
	// clients share the machine); Delivered is what members received in
	// it.
	WindowStart, WindowEnd time.Time
	CPU, Bench             time.Duration
	Delivered              int64
	Client                 clientGC // the bench client's own collector in the window and the drain
}

// podsShared is what the members of one run count into together.
type podsShared struct {
	measuring atomic.Bool  // latencies are recorded: the window and the drain
	window    atomic.Bool  // deliveries are counted for CPU a delivery
	over      atomic.Bool  // the run is closing its connections
	delivered atomic.Int64 // in the window
	cut       atomic.Int64
	latency   *histogram
}

// podMember is one participant of a pod in a --pods run.
type podMember struct {
	shared   *podsShared
	sender   bool // member 0 sends; what it receives is not counted
	conn     podConn
	received atomic.Int64
	next     atomic.Int64 // the sequence expected next
	twice    atomic.Int64
	order    atomic.Int64
}

func (l podsLoad) run(ctx context.Context) (podsResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shared := &podsShared{latency: newHistogram()}
	res := podsResult{Refusals: map[string]int{}, Latency: shared.latency}
	res.RSSBefore = l.rss()
	members := make([][]*podMember, l.Pods)
	for i := range members {
		members[i] = make([]*podMember, l.Members)
	}
	defer func() {
		shared.over.Store(true)
		for _, pm := range members {
			for _, m := range pm {
				if m != nil {
					m.conn.close()
				}
			}
		}
	}()
	// Joins, Dialers at a time, pod after pod so that pods fill one by
	// one as agents arrive.
	type job struct{ pod, member int }
	jobs := make(chan job)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for range l.Dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				m := &podMember{shared: shared, sender: j.member == 0}
				c, err := l.Transport.join(ctx, j.pod, j.member, j.pod*l.Members+j.member, m)
				mu.Lock()
				res.Joins++
				if err != nil {
					code := "error"
					var re *client.RefusedError
					if errors.As(err, &re) {
						code = fmt.Sprintf("%d %s", re.StatusCode, re.Code)
					} else if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					res.Refusals[code]++
					mu.Unlock()
					continue
				}
				res.Admitted++
				m.conn = c
				members[j.pod][j.member] = m
				mu.Unlock()
			}
		}()
	}
	for p := range l.Pods {
		for m := range l.Members {
			select {
			case jobs <- job{p, m}:
			case <-ctx.Done():
				close(jobs)
				wg.Wait()
				return res, ctx.Err()
			}
		}
	}
	close(jobs)
	wg.Wait()
	res.JoinTime = time.Since(start)
	// Let the presence of the last joins out, and the writers go idle.
	time.Sleep(l.Settle)
	res.RSSJoined = l.rss()

	// The window: member 0 of each pod sends, at Rate, from a time of its
	// own in the first second, so that the pods do not all send at once.
	collectorOn := clientCollectorOff()
	shared.measuring.Store(true)
	shared.window.Store(true)
	cpu0, bench0 := l.cpu(), selfCPU()
	res.WindowStart = time.Now()
	var sent, expected atomic.Int64
	tctx, tcancel := context.WithTimeout(ctx, l.Duration)
	defer tcancel()
	var senders sync.WaitGroup
	for p := range l.Pods {
		sender := members[p][0]
		if sender == nil {
			continue
		}
		receivers := int64(0)
		for _, m := range members[p][1:] {
			if m != nil {
				receivers++
			}
		}
		senders.Add(1)
		go func() {
			defer senders.Done()
			every := time.Duration(float64(time.Second) / l.Rate)
			t := time.NewTimer(time.Duration(rand.Int64N(int64(every))))
			defer t.Stop()
			var buf []byte
			for seq := 0; ; seq++ {
				select {
				case <-tctx.Done():
					return
				case <-t.C:
				}
				t.Reset(every)
				buf = podEnvelope(buf[:0], seq, l.Size)
				// ctx, not tctx: a write the window's end interrupted
				// would close the sender's connection.
				if err := sender.conn.send(ctx, buf); err != nil {
					return
				}
				sent.Add(1)
				expected.Add(receivers)
			}
		}()
	}
	senders.Wait()
	res.WindowEnd = time.Now()
	shared.window.Store(false)
	res.CPU, res.Bench = l.cpu()-cpu0, selfCPU()-bench0
	res.Delivered = shared.delivered.Load()
	res.Sent, res.Expected = sent.Load(), expected.Load()
	// What is on its way arrives, or Drain ends.
	for deadline := time.Now().Add(l.Drain); time.Now().Before(deadline) && received(members) < res.Expected; {
		time.Sleep(podsDrainPoll)
	}
	shared.measuring.Store(false)
	res.Client = collectorOn()
	res.RSSEnd = l.rss()
	for p := range members {
		for _, m := range members[p] {
			if m != nil && !m.sender {
				res.Twice += m.twice.Load()
				res.OutOfOrder += m.order.Load()
			}
		}
	}
	res.Received = received(members)
	res.Lost = res.Expected - res.Received
	res.Cut = shared.cut.Load()
	return res, nil
}

// received sums what the members of every pod received of its sender.
func received(members [][]*podMember) int64 {
	var n int64
	for p := range members {
		for _, m := range members[p] {
			if m != nil && !m.sender {
				n += m.received.Load()
			}
		}
	}
	return n
}

// cpu sums the server processes' CPU time.
func (l podsLoad) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range l.PIDs {
		if d, err := cpuTime(pid); err == nil {
			sum += d
		}
	}
	return sum
}

// selfCPU is this process's CPU time.
func selfCPU() time.Duration {
	d, _ := cpuTime(os.Getpid())
	return d
}

// rss sums the server processes' RSS (0 when there are none to watch).
func (l podsLoad) rss() int64 {
	var sum int64
	for _, pid := range l.PIDs {
		if r, err := rss(pid); err == nil {
			sum += r
		}
	}
	return sum
}

// podEnvelope is one envelope of a --pods run: its send time and its
// sequence in the pod, padded to size. NATS carries the same bytes as a
// message's payload.
func podEnvelope(dst []byte, seq, size int) []byte {
	dst = append(dst, `{"kind":"chat","payload":{"t":`...)
	dst = strconv.AppendInt(dst, time.Now().UnixNano(), 10)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"p":"`...)
	for pad := size - len(dst) - 3; pad > 0; pad-- {
		dst = append(dst, 'x')
	}
	return append(dst, `"}}`...)
}

var seqKey = []byte(`,"s":`)

// receive counts what a member received at now (Unix nanoseconds) of its
// pod's sender: each sequence once, in order, and its latency while
// measuring. Anything else (a welcome, presence) is not counted.
func (m *podMember) receive(b []byte, now int64) {
	if m.sender {
		return
	}
	i := bytes.Index(b, stampKey)
	j := bytes.Index(b, seqKey)
	if i < 0 || j < 0 {
		return
	}
	t, _ := parseStamp(b[i+len(stampKey):])
	seq, _ := parseStamp(b[j+len(seqKey):])
	if m.shared.measuring.Load() {
		m.shared.latency.record(now - t)
	}
	if m.shared.window.Load() {
		m.shared.delivered.Add(1)
	}
	switch next := m.next.Load(); {
	case seq == next:
		m.received.Add(1)
		m.next.Store(seq + 1)
	case seq > next:
		m.received.Add(1)
		m.order.Add(1) // one or more before it never came (yet)
		m.next.Store(seq + 1)
	default:
		m.twice.Add(1)
	}
}

// ended counts a connection that ended before its run did: the server
// cut it, or it failed.
func (m *podMember) ended() {
	if !m.shared.over.Load() {
		m.shared.cut.Add(1)
	}
}
