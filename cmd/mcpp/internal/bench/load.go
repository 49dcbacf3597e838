package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

// Load describes one measured run against one server.
type Load struct {
	URL string // ws://host:port/ws
	// SubscriberURLs, when set, spread the subscribers over several
	// gateway nodes, round robin; publishers use URL.
	SubscriberURLs []string
	Token          string
	Pod            string
	Subscribers    int
	Publishers     int
	Size           int
	Warmup         time.Duration
	Duration       time.Duration
	Window         int     // envelopes in flight, flat out
	Rate           float64 // envelopes a second in all; 0 is flat out
	Filters        bool    // half the subscribers contexts=none, half the envelopes in a context
	Batch          bool    // subscribers join with batch=1
	ServerPID      int     // 0 when the server is not ours to watch
}

// Result is what one run measured.
type Result struct {
	Envelopes   int64 // received by the tracking subscriber, which sees all
	Deliveries  int64 // received by all subscribers
	Elapsed     time.Duration
	Latency     *histogram
	ServerCPU   time.Duration
	WSMessages  int64 // WebSocket data messages the subscribers received
	Subscribers int
	// What went missing on the way, said so that it cannot flatter a
	// figure unnoticed (counted for NATS only): subscribers the server cut
	// during the run (slow consumers), and messages the client dropped
	// because its subscription's callback fell behind.
	Cut, Dropped int64
}

// DeliveriesPerSec is the headline figure.
func (r Result) DeliveriesPerSec() float64 { return float64(r.Deliveries) / r.Elapsed.Seconds() }

// EnvelopesPerSec is how many envelopes went through the gateway a second.
func (r Result) EnvelopesPerSec() float64 { return float64(r.Envelopes) / r.Elapsed.Seconds() }

// EnvelopesPerMessage is how many envelopes a WebSocket message carried to
// a subscriber, on average.
func (r Result) EnvelopesPerMessage() float64 {
	if r.WSMessages == 0 {
		return 0
	}
	return float64(r.Deliveries) / float64(r.WSMessages)
}

// DeliveriesPerCPUSecond is what the server delivers for a second of CPU
// time (0 when its CPU time was not measured).
func (r Result) DeliveriesPerCPUSecond() float64 {
	if r.ServerCPU <= 0 {
		return 0
	}
	return float64(r.Deliveries) / r.ServerCPU.Seconds()
}

// CPUPerDelivery is the server's CPU time per delivery.
func (r Result) CPUPerDelivery() time.Duration {
	if r.Deliveries == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.Deliveries)
}

// counters is what one subscriber counts, whatever server it reads from.
type counters struct {
	received atomic.Int64 // bench envelopes
	messages atomic.Int64 // WebSocket data messages that carried them
	_        [32]byte     // keeps two subscribers' counters off one cache line
}

type subscriber struct {
	counters
	conn *client.Conn
	all  bool // admits every envelope (the tracker does)
}

// run performs the load and returns its measurements.
func (l Load) run(ctx context.Context) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		measuring atomic.Bool
		hist      = newHistogram()
		credits   = l.newCredits()
		wg        sync.WaitGroup
		subs      = make([]*subscriber, l.Subscribers)
	)
	defer func() {
		for _, s := range subs {
			if s != nil {
				_ = s.conn.CloseNow()
			}
		}
		wg.Wait()
	}()
	for i := range subs {
		o := client.Options{Pod: l.Pod, Participant: fmt.Sprintf("sub-%d", i), Filter: &wire.Filter{}}
		all := true
		if l.Filters && i%2 == 1 {
			o.Filter.Contexts = wire.ContextsNone
			all = false
		}
		if l.Batch {
			o.Filter.Batch = wire.Bool(true)
		}
		u := l.URL
		if len(l.SubscriberURLs) > 0 {
			u = l.SubscriberURLs[i%len(l.SubscriberURLs)]
		}
		c, err := l.dialURL(ctx, u, o)
		if err != nil {
			return Result{}, fmt.Errorf("subscriber %d: %w", i, err)
		}
		s := &subscriber{conn: c, all: all}
		subs[i] = s
		tracker := i == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.read(ctx, &measuring, hist, tracker, credits)
		}()
	}
	pubs := make([]*client.Conn, l.Publishers)
	for i := range pubs {
		c, err := l.dial(ctx, l.Pod, fmt.Sprintf("pub-%d", i))
		if err != nil {
			return Result{}, fmt.Errorf("publisher %d: %w", i, err)
		}
		pubs[i] = c
		defer c.CloseNow()
		// Publishers read too (welcome, presence, errors), or their queues
		// at the gateway would fill.
		go func() {
			var buf []byte
			for {
				var err error
				if buf, err = c.Read(ctx, buf[:0]); err != nil {
					return
				}
			}
		}()
	}
	// Let presence of the joins drain before sending.
	time.Sleep(200*time.Millisecond + time.Duration(l.Subscribers)*time.Millisecond)

	pubErr := make(chan error, len(pubs))
	for i, c := range pubs {
		go func() { pubErr <- l.publish(ctx, c, i, credits) }()
	}
	counts := make([]*counters, len(subs))
	for i, s := range subs {
		counts[i] = &s.counters
	}
	r, err := l.measure(counts, &measuring, pubErr)
	cancel()
	r.Latency = hist
	return r, err
}

// newCredits is the window: a publisher takes a credit for each envelope it
// sends and the tracking subscriber (subscriber 0, which admits every
// envelope) gives one back for each it receives, so at most l.Window
// envelopes are sent and not yet received by it. Every load, whatever the
// server, bounds its envelopes in flight this way.
func (l Load) newCredits() chan struct{} {
	credits := make(chan struct{}, max(l.Window, 1))
	for i := 0; i < cap(credits); i++ {
		credits <- struct{}{}
	}
	return credits
}

// giveBack returns n credits; it never blocks (at a fixed rate nobody takes
// them).
func giveBack(credits chan struct{}, n int64) {
	for ; n > 0; n-- {
		select {
		case credits <- struct{}{}:
		default:
		}
	}
}

// measure waits out the warm-up while the publishers run, then measures
// for l.Duration: what the subscribers counted (counts[0] is the tracker)
// and the server's CPU time. A publisher's error ends the run.
func (l Load) measure(counts []*counters, measuring *atomic.Bool, pubErr <-chan error) (Result, error) {
	select {
	case err := <-pubErr:
		return Result{}, err
	case <-time.After(l.Warmup):
	}
	sum := func() (env, del, msgs int64) {
		for i, c := range counts {
			n := c.received.Load()
			if i == 0 {
				env = n
			}
			del += n
			msgs += c.messages.Load()
		}
		return
	}
	cpu0 := l.cpu()
	env0, del0, msg0 := sum()
	start := time.Now()
	measuring.Store(true)
	select {
	case err := <-pubErr:
		return Result{}, err
	case <-time.After(l.Duration):
	}
	measuring.Store(false)
	env1, del1, msg1 := sum()
	elapsed := time.Since(start)
	cpu1 := l.cpu()
	return Result{
		Envelopes: env1 - env0, Deliveries: del1 - del0, Elapsed: elapsed,
		ServerCPU: cpu1 - cpu0, WSMessages: msg1 - msg0, Subscribers: l.Subscribers,
	}, nil
}

func (l Load) cpu() time.Duration {
	if l.ServerPID == 0 {
		return 0
	}
	d, _ := cpuTime(l.ServerPID)
	return d
}

// dial joins pod at l.URL as participant, with nothing but the defaults.
func (l Load) dial(ctx context.Context, pod, participant string) (*client.Conn, error) {
	return l.dialURL(ctx, l.URL, client.Options{Pod: pod, Participant: participant})
}

// dialURL connects to the gateway at u as o says (pod, participant,
// filter), with l's token. It is a bare client.Conn: the bench reads the
// gateway's bytes itself and spends no CPU decoding them.
func (l Load) dialURL(ctx context.Context, u string, o client.Options) (*client.Conn, error) {
	o.Token = l.Token
	o.DialTimeout = 20 * time.Second
	o.ReadLimit = 64 << 20
	return client.DialConn(ctx, u, o)
}

var stampKey = []byte(`"t":`)

// read counts the bench envelopes a subscriber receives and their latency.
func (s *subscriber) read(ctx context.Context, measuring *atomic.Bool, h *histogram, tracker bool, credits chan struct{}) {
	buf := make([]byte, 0, 64<<10)
	for {
		var err error
		if buf, err = s.conn.Read(ctx, buf[:0]); err != nil {
			return
		}
		s.messages.Add(1)
		now := time.Now().UnixNano()
		var n int64
		for line := buf; len(line) > 0; {
			end := bytes.IndexByte(line, '\n')
			cur := line
			if end >= 0 {
				cur, line = line[:end], line[end+1:]
			} else {
				line = nil
			}
			if stamped(cur, now, measuring, h) {
				n++
			}
		}
		s.received.Add(n)
		if tracker {
			giveBack(credits, n)
		}
	}
}

// stamped reports whether b is a bench envelope (it carries a send time),
// and records its latency while measuring.
func stamped(b []byte, now int64, measuring *atomic.Bool, h *histogram) bool {
	i := bytes.Index(b, stampKey)
	if i < 0 {
		return false // welcome, presence
	}
	if measuring.Load() {
		if t, ok := parseStamp(b[i+len(stampKey):]); ok {
			h.record(now - t)
		}
	}
	return true
}

func parseStamp(b []byte) (int64, bool) {
	var v int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		v = v*10 + int64(b[i]-'0')
	}
	return v, i > 0
}

// publish sends envelopes of l.Size bytes, flat out within the window of
// credits or at the publisher's share of l.Rate.
func (l Load) publish(ctx context.Context, c *client.Conn, idx int, credits chan struct{}) error {
	var buf []byte
	p := l.newPacer(credits)
	for seq := 0; p.wait(ctx); seq++ {
		buf = l.envelope(buf[:0], seq)
		if err := c.Write(ctx, buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("publisher %d: %w", idx, err)
		}
	}
	return nil
}

// pacer decides when a publisher sends its next envelope: as soon as it
// holds a credit of the window (flat out), or at its share of l.Rate.
type pacer struct {
	credits chan struct{}
	limiter *rate.Limiter // nil: flat out
}

func (l Load) newPacer(credits chan struct{}) *pacer {
	p := &pacer{credits: credits}
	if l.Rate > 0 {
		// A burst of 5 ms of envelopes: a publisher that slept past its
		// time (timers are coarse on a busy machine, and each send takes
		// time too) catches up, so that it keeps its rate on average. With
		// a burst of one it fell 20 to 40% short at 20,000 a second.
		r := l.Rate / float64(l.Publishers)
		p.limiter = rate.NewLimiter(rate.Limit(r), max(1, int(r/200)))
	}
	return p
}

// wait blocks until the next envelope is due; false once ctx is done.
func (p *pacer) wait(ctx context.Context) bool {
	if p.limiter == nil {
		select {
		case <-ctx.Done():
			return false
		case <-p.credits:
			return true
		}
	}
	return p.limiter.Wait(ctx) == nil
}

// envelope writes one bench envelope of l.Size bytes (at least what the
// fields need).
func (l Load) envelope(dst []byte, seq int) []byte {
	dst = append(dst, `{"kind":"bench",`...)
	if l.Filters && seq%2 == 1 {
		dst = append(dst, `"context":{"id":"bench-ctx","type":"reasoning"},`...)
	}
	dst = append(dst, `"payload":{"t":`...)
	dst = strconv.AppendInt(dst, time.Now().UnixNano(), 10)
	dst = append(dst, `,"s":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"p":"`...)
	for pad := l.Size - len(dst) - 3; pad > 0; pad-- {
		dst = append(dst, 'x')
	}
	return append(dst, `"}}`...)
}

// histogram counts latencies in buckets 1/16 of an octave wide (about 4%),
// and keeps the largest exactly.
type histogram struct {
	buckets [64 * 16]atomic.Int64
	largest atomic.Int64
}

func newHistogram() *histogram { return &histogram{} }

func (h *histogram) record(ns int64) {
	if ns < 1 {
		ns = 1
	}
	for m := h.largest.Load(); ns > m && !h.largest.CompareAndSwap(m, ns); m = h.largest.Load() {
	}
	b := int(math.Log2(float64(ns)) * 16)
	if b >= len(h.buckets) {
		b = len(h.buckets) - 1
	}
	h.buckets[b].Add(1)
}

// maximum is the largest latency recorded (0: none).
func (h *histogram) maximum() time.Duration { return time.Duration(h.largest.Load()) }

// quantile returns the latency below which q of the samples fall (the
// top of its bucket, at most the largest).
func (h *histogram) quantile(q float64) time.Duration {
	var total int64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= want {
			// A bucket's top, but never above the largest seen.
			return min(time.Duration(math.Exp2(float64(i+1)/16)), h.maximum())
		}
	}
	return 0
}
