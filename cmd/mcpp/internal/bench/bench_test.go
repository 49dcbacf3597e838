package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.record(int64(i) * int64(time.Microsecond))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.quantile(c.q)
		if got < c.want*95/100 || got > c.want*105/100 {
			t.Errorf("quantile(%v) = %v, want %v within 5%%", c.q, got, c.want)
		}
	}
	if newHistogram().quantile(0.5) != 0 {
		t.Error("an empty histogram has a quantile")
	}
}

func TestMedianAndEnvelope(t *testing.T) {
	rs := []Result{{Deliveries: 30, Elapsed: time.Second}, {Deliveries: 10, Elapsed: time.Second}, {Deliveries: 20, Elapsed: time.Second}}
	if m := median(rs, Result.DeliveriesPerSec); m != 20 {
		t.Errorf("median = %v, want 20", m)
	}
	l := Load{Size: 256, Filters: true}
	for seq := 0; seq < 2; seq++ {
		if b := l.envelope(nil, seq); len(b) != 256 {
			t.Errorf("envelope %d is %d bytes, want 256: %s", seq, len(b), b)
		}
	}
	if wsURL("ws://h:1") != "ws://h:1/ws" || wsURL("ws://h:1/ws") != "ws://h:1/ws" {
		t.Error("wsURL")
	}
}

func TestCheckPeer(t *testing.T) {
	for _, c := range []struct {
		peer                  string
		remote, filters, idle bool
		ok                    bool
	}{
		{peer: "", remote: true, filters: true, idle: true, ok: true}, // no peer, nothing to check
		{peer: "nats", ok: true},
		{peer: "kafka"},
		{peer: "NATS"},
		{peer: "nats", remote: true},
		{peer: "nats", filters: true},
		{peer: "nats", idle: true},
	} {
		if msg := checkPeer(c.peer, c.remote, c.filters, c.idle); (msg == "") != c.ok {
			t.Errorf("checkPeer(%+v) = %q", c, msg)
		}
	}
	// A usage error, before any server is started.
	for _, args := range [][]string{
		{"--peer", "kafka"},
		{"--peer", "nats", "--gateway", "ws://127.0.0.1:1"},
		{"--peer", "nats", "--filters"},
		{"--peer", "nats", "--idle", "10"},
	} {
		var stderr strings.Builder
		if code := Run(args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("Run(%q) = %d (%q), want 2 and a message", args, code, stderr.String())
		}
	}
}

// wsFrame is a server's frame: unmasked unless key is given.
func wsFrame(fin bool, opcode byte, payload []byte, key []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	var mask byte
	if key != nil {
		mask = 0x80
	}
	f := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		f = append(f, mask|byte(n))
	case n <= 0xffff:
		f = append(f, mask|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, mask|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(f, key...)
	return append(f, payload...)
}

func TestFrameParserCountsDataMessages(t *testing.T) {
	// The payloads hold what would confuse a sloppy parser (frame-like
	// bytes, the HTTP answer's blank line), and the answer itself holds a
	// near miss of its blank line.
	tricky := bytes.Repeat([]byte("\r\n\r\n\x82\x7f"), 50)
	var stream []byte
	stream = append(stream, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\r\nConnection: Upgrade\r\n\r\n"...)
	stream = append(stream, wsFrame(true, 2, []byte("INFO {}\r\n"), nil)...)      // 1
	stream = append(stream, wsFrame(true, 9, []byte("ping"), nil)...)             // control: not counted
	stream = append(stream, wsFrame(true, 1, tricky, nil)...)                     // 2: 16-bit length
	stream = append(stream, wsFrame(false, 2, tricky[:7], nil)...)                // a fragment…
	stream = append(stream, wsFrame(true, 0, tricky[7:], nil)...)                 // 3: …and its end
	stream = append(stream, wsFrame(true, 2, bytes.Repeat(tricky, 300), nil)...)  // 4: 64-bit length
	stream = append(stream, wsFrame(true, 2, nil, nil)...)                        // 5: empty
	stream = append(stream, wsFrame(true, 2, tricky[:20], []byte{1, 2, 3, 4})...) // 6: masked
	stream = append(stream, wsFrame(true, 8, []byte{3, 232}, nil)...)             // close: not counted
	const want = 6
	for _, chunk := range []int{len(stream), 1, 2, 3, 7, 13, 4096} {
		var p frameParser
		var got int64
		for b := stream; len(b) > 0; {
			n := min(chunk, len(b))
			got += p.feed(b[:n])
			b = b[n:]
		}
		if got != want || p.payload != 0 || p.hdrLen != 0 {
			t.Errorf("read %d bytes at a time: %d messages (payload left %d, header %d), want %d", chunk, got, p.payload, p.hdrLen, want)
		}
	}
}

func TestPacerAndCredits(t *testing.T) {
	l := Load{Window: 2}
	credits := l.newCredits()
	if len(credits) != 2 {
		t.Fatalf("a window of 2 starts with %d credits", len(credits))
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := l.newPacer(credits)
	if !p.wait(ctx) || !p.wait(ctx) {
		t.Fatal("flat out, the pacer refused a credit of the window")
	}
	cancel()
	if p.wait(ctx) {
		t.Fatal("the pacer went on past the window once cancelled")
	}
	giveBack(credits, 5) // more than the window: must not block
	if len(credits) != 2 {
		t.Errorf("%d credits after giving back 5, want the window (2)", len(credits))
	}
}

func TestTableRatios(t *testing.T) {
	res := func(deliveries, messages int64, cpu time.Duration, lat time.Duration) Result {
		h := newHistogram()
		h.record(int64(lat))
		return Result{Deliveries: deliveries, WSMessages: messages, Elapsed: time.Second, ServerCPU: cpu, Latency: h}
	}
	results := map[kind][]Result{
		kindGateway: {res(1000, 100, 500*time.Millisecond, time.Millisecond)},
		kindRelay:   {res(500, 500, 500*time.Millisecond, time.Millisecond)},
		kindNATS:    {res(4000, 100, time.Second, 4*time.Millisecond)},
	}
	var out strings.Builder
	b := &bencher{out: &out}
	b.table("medians", results, []kind{kindGateway, kindRelay, kindNATS})
	for _, want := range []string{
		// deliveries/s, envelopes per message, deliveries per CPU-second, latencies
		"gateway/baseline           2.00            10.00             2.00      1.00      1.00      1.00",
		"gateway/nats               0.25             0.25             0.50      0.25      0.25      0.25",
		"nats                       4000             40.0             4000",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if (Result{}).EnvelopesPerMessage() != 0 || (Result{Deliveries: 1}).DeliveriesPerCPUSecond() != 0 || ratio(1, 0) != 0 {
		t.Error("a figure with nothing to divide by is not 0")
	}
}

// TestRunNATS drives an in-process nats-server as `--peer nats` drives its
// own process: what matters here is that envelopes, WebSocket messages and
// latencies are counted and nothing is lost, not how fast it went.
func TestRunNATS(t *testing.T) {
	addr, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	ns, err := startNATS(host, p)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	l := Load{URL: "ws://" + addr, Pod: "bench", Subscribers: 3, Publishers: 2, Size: 256,
		Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond, Window: 16}
	r, err := l.runNATS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Envelopes == 0 || r.Deliveries < r.Envelopes || r.WSMessages == 0 || r.Latency.quantile(0.5) == 0 {
		t.Errorf("nothing measured: %+v", r)
	}
	if r.Cut != 0 || r.Dropped != 0 {
		t.Errorf("%d subscribers cut, %d messages dropped", r.Cut, r.Dropped)
	}
}

func TestPacerAtARate(t *testing.T) {
	l := Load{Rate: 200, Publishers: 2} // 100 a second each
	p := l.newPacer(nil)
	ctx := context.Background()
	start := time.Now()
	for range 11 {
		if !p.wait(ctx) {
			t.Fatal("the pacer refused an envelope")
		}
	}
	// The first is due at once, the next ten 10 ms apart.
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("11 envelopes at 100 a second took %v, want at least 100 ms", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if p.wait(cctx) {
		t.Error("the pacer went on once cancelled")
	}
}

// TestPacerCatchesUp: each publisher's share of --rate, with a burst of
// 5 ms of envelopes, so that a publisher that slept past its time (timers
// are coarse on a busy machine, and each send takes time too) catches up
// and keeps its rate on average, but no more than 5 ms of them. Read on
// the limiter's own clock, not the machine's (a timed test would measure
// the machine).
func TestPacerCatchesUp(t *testing.T) {
	lim := Load{Rate: 20000, Publishers: 2}.newPacer(nil).limiter
	if lim.Limit() != 10000 || lim.Burst() != 50 {
		t.Fatalf("a publisher's pacer: %v a second, bursts of %d; want 10000 and 50 (5 ms)", lim.Limit(), lim.Burst())
	}
	t0 := time.Now()
	if !lim.AllowN(t0, 50) {
		t.Fatal("the first 5 ms of envelopes were not allowed at once")
	}
	// Woken 5 ms late: the 50 envelopes due meanwhile go at once.
	if !lim.AllowN(t0.Add(5*time.Millisecond), 50) {
		t.Fatal("a publisher woken 5 ms late may not catch up")
	}
	// After a long stall, no more than 5 ms of them.
	if lim.AllowN(t0.Add(time.Second), 51) {
		t.Fatal("a publisher stalled for a second may send more than 5 ms of envelopes at once")
	}
	if p := (Load{Publishers: 1}).newPacer(nil); p.limiter != nil {
		t.Fatal("without --rate the publishers go flat out, with no limiter")
	}
}

// TestVersusEnv: NAME=VALUE words of --versus are the gateway's
// environment (tracing's OTEL_* variables), the rest its flags.
func TestVersusEnv(t *testing.T) {
	env, flags := versusEnv(strings.Fields("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 --history 0 OTEL_TRACES_SAMPLER_ARG=0.01 --tokens=a=b lower=x"))
	if strings.Join(env, " ") != "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_TRACES_SAMPLER_ARG=0.01" ||
		strings.Join(flags, " ") != "--history 0 --tokens=a=b lower=x" {
		t.Fatalf("env %q, flags %q", env, flags)
	}
}
