package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpp/gateway/client"
)

// podsLoad is --pods: many small pods, as a gateway that serves agents
// holds them (issue 21): each of Members participants, one of whom sends
// Rate envelopes a second, the others receiving. It measures whether
// every join is admitted, what a pod costs the gateway's memory with its
// connections, the latency of delivery, and what went missing.
type podsLoad struct {
	Pods     int
	Members  int
	Rate     float64 // envelopes a second per pod
	Duration time.Duration
	Size     int
	Dialers  int      // joins under way at once
	URLs     []string // the nodes; members of a pod are spread over them
	Token    string
	PIDs     []int // the gateway processes to watch (0: none)
}

// podsResult is what a --pods run measured.
type podsResult struct {
	Joins, Admitted int
	Refusals        map[string]int
	// RSS of the gateway processes, all together: before any join, once
	// every member joined, and at the end of the traffic.
	RSSBefore, RSSJoined, RSSEnd int64
	Sent, Expected, Received     int64
	Lost, Twice, OutOfOrder      int64
	Latency                      *histogram
	JoinTime                     time.Duration
	// CPU is the gateway processes' CPU time during the traffic, and
	// Bench this process's (the clients share the machine).
	CPU, Bench time.Duration
}

// member is one participant of a pod in a --pods run.
type podMember struct {
	conn     *client.Conn
	received atomic.Int64
	next     atomic.Int64 // the sequence expected next
	lost     atomic.Int64
	twice    atomic.Int64
	order    atomic.Int64
}

func (l podsLoad) run(ctx context.Context) (podsResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := podsResult{Refusals: map[string]int{}, Latency: newHistogram()}
	res.RSSBefore = l.rss()
	members := make([][]*podMember, l.Pods)
	for i := range members {
		members[i] = make([]*podMember, l.Members)
	}
	defer func() {
		for _, pm := range members {
			for _, m := range pm {
				if m != nil {
					_ = m.conn.CloseNow()
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
	measuring := &atomic.Bool{}
	start := time.Now()
	for range l.Dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				u := l.URLs[(j.pod+j.member)%len(l.URLs)]
				c, err := client.DialConn(ctx, u, client.Options{Pod: fmt.Sprintf("pod-%d", j.pod),
					Participant: fmt.Sprintf("m%d", j.member), Token: l.Token, DialTimeout: 30 * time.Second, ReadLimit: 1 << 20})
				mu.Lock()
				res.Joins++
				if err != nil {
					code := "error"
					var re *client.RefusedError
					if errors.As(err, &re) {
						code = fmt.Sprintf("%d %s", re.StatusCode, re.Code)
					}
					res.Refusals[code]++
					mu.Unlock()
					continue
				}
				res.Admitted++
				mu.Unlock()
				m := &podMember{conn: c}
				members[j.pod][j.member] = m
				go m.read(ctx, measuring, res.Latency)
			}
		}()
	}
	for p := range l.Pods {
		for m := range l.Members {
			select {
			case jobs <- job{p, m}:
			case <-ctx.Done():
				close(jobs)
				return res, ctx.Err()
			}
		}
	}
	close(jobs)
	wg.Wait()
	res.JoinTime = time.Since(start)
	// Let the presence of the last joins out, and the writers go idle.
	time.Sleep(5 * time.Second)
	res.RSSJoined = l.rss()

	// Traffic: member 0 of each pod sends, at Rate, from a time of its own
	// in the first second, so that the pods do not all send at once.
	measuring.Store(true)
	cpu0, bench0 := l.cpu(), selfCPU()
	var sent atomic.Int64
	var expected atomic.Int64
	tctx, tcancel := context.WithTimeout(ctx, l.Duration)
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
				if err := sender.conn.Write(tctx, buf); err != nil {
					return
				}
				sent.Add(1)
				expected.Add(receivers)
			}
		}()
	}
	senders.Wait()
	tcancel()
	res.CPU, res.Bench = l.cpu()-cpu0, selfCPU()-bench0
	// What is on its way arrives.
	time.Sleep(3 * time.Second)
	measuring.Store(false)
	res.RSSEnd = l.rss()
	res.Sent, res.Expected = sent.Load(), expected.Load()
	for p := range members {
		for i, m := range members[p] {
			if m == nil || i == 0 {
				continue
			}
			res.Received += m.received.Load()
			res.Twice += m.twice.Load()
			res.OutOfOrder += m.order.Load()
		}
	}
	res.Lost = res.Expected - res.Received
	return res, nil
}

// cpu sums the gateway processes' CPU time.
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

// rss sums the gateway processes' RSS (0 when there are none to watch).
func (l podsLoad) rss() int64 {
	var sum int64
	for _, pid := range l.PIDs {
		if pid == 0 {
			continue
		}
		if r, err := rss(pid); err == nil {
			sum += r
		}
	}
	return sum
}

// podEnvelope is one envelope of a --pods run: its send time and its
// sequence in the pod, padded to size.
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

// read counts what a member receives of its pod's sender: each sequence
// once, in order, and its latency while measuring.
func (m *podMember) read(ctx context.Context, measuring *atomic.Bool, h *histogram) {
	var buf []byte
	for {
		var err error
		if buf, err = m.conn.Read(ctx, buf[:0]); err != nil {
			return
		}
		now := time.Now().UnixNano()
		i := bytes.Index(buf, stampKey)
		j := bytes.Index(buf, seqKey)
		if i < 0 || j < 0 {
			continue // welcome, presence
		}
		t, _ := parseStamp(buf[i+len(stampKey):])
		seq, _ := parseStamp(buf[j+len(seqKey):])
		if measuring.Load() {
			h.record(now - t)
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
}

// podsReport prints a --pods run.
func podsReport(l podsLoad, r podsResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# --pods %d --members %d: %d connections over %d node(s), %.2g envelopes a second per pod (%.0f in all), %d B, %s of traffic\n",
		l.Pods, l.Members, l.Pods*l.Members, len(l.URLs), l.Rate, l.Rate*float64(l.Pods), l.Size, l.Duration)
	fmt.Fprintf(&b, "joins: %d of %d admitted in %s", r.Admitted, r.Joins, r.JoinTime.Round(time.Millisecond))
	for code, n := range r.Refusals {
		fmt.Fprintf(&b, "; %d refused %s", n, code)
	}
	b.WriteString("\n")
	if r.RSSBefore > 0 {
		per := func(v int64) float64 { return float64(v-r.RSSBefore) / float64(l.Pods) / 1024 }
		fmt.Fprintf(&b, "gateway RSS: %.1f MiB before, %.1f MiB joined (%.1f KiB a pod with its %d connections), %.1f MiB after the traffic (%.1f KiB a pod)\n",
			float64(r.RSSBefore)/(1<<20), float64(r.RSSJoined)/(1<<20), per(r.RSSJoined), l.Members,
			float64(r.RSSEnd)/(1<<20), per(r.RSSEnd))
	}
	fmt.Fprintf(&b, "envelopes: %d sent, %d deliveries expected, %d received; lost %d, twice %d, out of order %d\n",
		r.Sent, r.Expected, r.Received, r.Lost, r.Twice, r.OutOfOrder)
	fmt.Fprintf(&b, "latency: p50 %s p99 %s p999 %s\n", short(r.Latency.quantile(0.5)), short(r.Latency.quantile(0.99)), short(r.Latency.quantile(0.999)))
	if r.CPU > 0 {
		fmt.Fprintf(&b, "CPU during the traffic: gateway %.2f cores (%.1f µs an envelope), bench clients %.2f cores\n",
			r.CPU.Seconds()/l.Duration.Seconds(), float64(r.CPU.Microseconds())/float64(max(r.Sent, 1)), r.Bench.Seconds()/l.Duration.Seconds())
	}
	return b.String()
}
