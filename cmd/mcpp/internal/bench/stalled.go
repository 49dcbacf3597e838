package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpp/gateway/client"
)

// `mcpp bench --stalled N` measures what readers that stop reading cost
// the gateway: N pods, each with one sender and one reader that reads its
// welcome and then nothing. Each sender sends --stalled-envelopes
// envelopes of --size bytes, flat out. bench samples the gateway's RSS
// every 100 ms (VmRSS of /proc/PID/status) from its start to the end, and
// reports the peak, the RSS once everything was accepted and --settle has
// passed, the cuts the gateway counted (mcpp_cuts_total, or the older
// mcpp_slow_consumer_disconnects_total) and how each stalled reader's
// connection ended, as it sees when it reads again at the end.
//
// The gateway runs with its defaults (queues, timeouts, history), only the
// rates opened wide so that the senders are not refused: what is measured
// is what the defaults hold. A gateway that queues without a bound in
// bytes can hold every envelope for every stalled reader, pods ×
// envelopes × size, so bench refuses a run whose twice that (Go's heap
// grows to about twice what is live) is over the memory available.

// stalledLoad is one --stalled run.
type stalledLoad struct {
	Pods      int // one sender and one stalled reader each
	Envelopes int // each sender sends this many
	Size      int // bytes per envelope
	// Settle is the time after the gateway has accepted the last envelope
	// before the end figures are read.
	Settle time.Duration
}

// checkStalled says what is wrong with a --stalled command line, or "".
// memAvailable is the machine's available memory in bytes (0: unknown).
func checkStalled(l stalledLoad, remoteGateway, otherMode bool, memAvailable int64) string {
	switch {
	case l.Pods < 1:
		return "--stalled takes the number of pods (stalled readers), at least 1"
	case l.Envelopes < 1:
		return "--stalled-envelopes must be at least 1"
	case l.Size < 64:
		return "--size must be at least 64"
	case l.Settle < 0:
		return "--settle must not be negative"
	case remoteGateway:
		return "--stalled needs bench to start the gateway itself (no --gateway): it reads the process's memory"
	case otherMode:
		return "--stalled does not go with --baseline, --versus, --peer, --idle or --soak"
	}
	if worst := l.worstCase(); memAvailable > 0 && 2*worst > memAvailable {
		return fmt.Sprintf("%d pods × %d envelopes × %d B = %s could all be held by a gateway whose queues are not bounded in bytes, and twice that is over the %s available: send fewer envelopes",
			l.Pods, l.Envelopes, l.Size, bytesString(worst), bytesString(memAvailable))
	}
	return ""
}

// worstCase is what a gateway that holds every envelope for its stalled
// reader would hold.
func (l stalledLoad) worstCase() int64 { return int64(l.Pods) * int64(l.Envelopes) * int64(l.Size) }

// memAvailable is MemAvailable of /proc/meminfo, or 0.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// wideRates open the gateway's rate limits, and nothing else.
var wideRates = []string{"--rate", "1e9", "--burst", "1000000000", "--context-rate", "1e9", "--context-burst", "1000000000",
	"--context-create-rate", "1e9", "--context-create-burst", "1000000000"}

// startGatewayWith runs the gateway with its defaults but for args,
// logging at info (cuts are logged there).
func startGatewayWith(bin string, args []string) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args = append([]string{"--listen", addr, "--log-level", "info"}, args...)
	return startProcess("gateway", bin, args, addr, "ws://"+addr+"/ws")
}

// peakSampler reads a process's RSS every period and keeps the samples.
type peakSampler struct {
	mu      sync.Mutex
	start   time.Time
	samples []rssSample
	stop    chan struct{}
	done    chan struct{}
}

type rssSample struct {
	at  time.Duration // after the start
	rss int64
}

// add records one sample taken at t after the start.
func (p *peakSampler) add(t time.Duration, v int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, rssSample{t, v})
}

// result is the peak, when the RSS first came within 1 MiB of it (a
// plateau that creeps up by a page now and then has its peak at its end,
// which says little), and how many samples were taken.
func (p *peakSampler) result() (peak int64, at time.Duration, samples int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.samples {
		peak = max(peak, s.rss)
	}
	for _, s := range p.samples {
		if s.rss >= peak-1<<20 {
			at = s.at
			break
		}
	}
	return peak, at, len(p.samples)
}

func samplePeak(pid int, every time.Duration) *peakSampler {
	p := &peakSampler{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, err := rss(pid); err == nil {
				p.add(time.Since(p.start), v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakSampler) halt() {
	close(p.stop)
	<-p.done
}

// metricSet is a scrape of /metrics, parsed by Prometheus's own text
// parser: each metric family by name.
type metricSet map[string]*dto.MetricFamily

// parseMetrics reads the Prometheus text format.
func parseMetrics(r io.Reader) (metricSet, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// value is a sample's value, whatever the metric's type.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// sum is the total of every series of the metric name, and whether there
// was any.
func (m metricSet) sum(name string) (float64, bool) {
	f, ok := m[name]
	if !ok {
		return 0, false
	}
	var total float64
	for _, s := range f.Metric {
		total += value(s)
	}
	return total, true
}

// get is the value of a metric without labels (0 when absent).
func (m metricSet) get(name string) float64 {
	v, _ := m.sum(name)
	return v
}

// byLabel is the series of name by the value of label, e.g. the cuts by
// reason.
func (m metricSet) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	if f, ok := m[name]; ok {
		for _, s := range f.Metric {
			for _, l := range s.Label {
				if l.GetName() == label {
					out[l.GetValue()] += value(s)
				}
			}
		}
	}
	return out
}

// cuts says what the gateway counted: mcpp_cuts_total by reason, or, from
// a gateway older than it, mcpp_slow_consumer_disconnects_total (which
// counted slow consumers alone).
func (m metricSet) cuts() string {
	if by := m.byLabel("mcpp_cuts_total", "reason"); len(by) > 0 {
		return formatCounts(by, "")
	}
	if v, ok := m.sum("mcpp_cuts_total"); ok {
		return fmt.Sprintf("mcpp_cuts_total %.0f", v)
	}
	if v, ok := m.sum("mcpp_slow_consumer_disconnects_total"); ok {
		return fmt.Sprintf("mcpp_slow_consumer_disconnects_total %.0f (this gateway counts no other cut)", v)
	}
	return "none counted"
}

// formatCounts writes counts as "a 3, b 1", sorted by key; empty when
// there are none.
func formatCounts[V int | int64 | float64](counts map[string]V, none string) string {
	if len(counts) == 0 {
		return none
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %v", k, counts[k])
	}
	return strings.Join(parts, ", ")
}

// scrape reads the gateway's /metrics.
func scrape(ctx context.Context, addr string) (metricSet, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// bytesString writes n in MiB or GiB.
func bytesString(n int64) string {
	switch {
	case n >= 10<<30 || n <= -10<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<30 || n <= -1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// fate is how a stalled reader's connection ended, as the reader sees it
// when it reads again.
type fate struct {
	how       string // "closed 4008", "lost without a close frame", "still open"…
	envelopes int    // bench envelopes it then read
}

// fateOf names the end of a read that stopped with err (nil: the reader
// gave up waiting and the connection is still open).
func fateOf(err error, gaveUp bool) string {
	if gaveUp || err == nil {
		return "still open"
	}
	var closed *client.ClosedError
	if errors.As(err, &closed) {
		return fmt.Sprintf("closed %d", int(closed.Code))
	}
	return "lost without a close frame"
}

// tallyFates counts the fates and the envelopes read.
func tallyFates(fs []fate) (counts map[string]int, envelopes int) {
	counts = map[string]int{}
	for _, f := range fs {
		counts[f.how]++
		envelopes += f.envelopes
	}
	return counts, envelopes
}

// stalledEnvelope writes envelope seq of size bytes.
func stalledEnvelope(dst []byte, size, seq int) []byte {
	dst = append(dst, `{"kind":"stalled","payload":{"s":`...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"p":"`...)
	for pad := size - len(dst) - 3; pad > 0; pad-- {
		dst = append(dst, 'x')
	}
	return append(dst, `"}}`...)
}

var stalledKind = []byte(`"kind":"stalled"`)

type stalledPod struct {
	reader, sender *client.Conn
	refused        atomic.Int64 // system/error answers the sender received
}

// stalled runs the --stalled measurement against a gateway it starts.
func (b *bencher) stalled(ctx context.Context, l stalledLoad) error {
	bin, err := gatewayBinary(b.gwBin)
	if err != nil {
		return err
	}
	s, err := startGatewayWith(bin, append(append([]string{}, wideRates...), b.gwArgs...))
	if err != nil {
		return err
	}
	defer s.stop()
	fmt.Fprintf(b.out, "# stalled readers: %d pod(s), each with one sender of %d envelopes of %d B (%s) and one reader that stops after its welcome\n",
		l.Pods, l.Envelopes, l.Size, bytesString(int64(l.Envelopes)*int64(l.Size)))
	fmt.Fprintf(b.out, "# gateway %s, defaults but the rates%s; RSS sampled every 100 ms; a gateway that held every envelope would hold %s\n",
		bin, argsNote(b.gwArgs), bytesString(l.worstCase()))
	time.Sleep(500 * time.Millisecond)
	rss0, err := rss(s.pid())
	if err != nil {
		return err
	}
	peak := samplePeak(s.pid(), 100*time.Millisecond)
	defer func() {
		select {
		case <-peak.stop:
		default:
			peak.halt()
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	load := Load{URL: s.ws}
	pods := make([]*stalledPod, l.Pods)
	var readers sync.WaitGroup
	defer func() {
		for _, p := range pods {
			if p != nil {
				if p.reader != nil {
					_ = p.reader.CloseNow()
				}
				if p.sender != nil {
					_ = p.sender.CloseNow()
				}
			}
		}
		readers.Wait()
	}()
	for i := range pods {
		p := &stalledPod{}
		pods[i] = p
		pod := fmt.Sprintf("stalled-%d", i)
		if p.reader, err = load.dial(ctx, pod, "reader"); err != nil {
			return fmt.Errorf("reader %d: %w", i, err)
		}
		// The welcome, then nothing: the reader has stalled.
		if _, err := p.reader.Read(ctx, nil); err != nil {
			return fmt.Errorf("reader %d: welcome: %w", i, err)
		}
		if p.sender, err = load.dial(ctx, pod, "sender"); err != nil {
			return fmt.Errorf("sender %d: %w", i, err)
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			var m []byte
			for {
				var err error
				if m, err = p.sender.Read(ctx, m[:0]); err != nil {
					return
				}
				if bytes.Contains(m, []byte(`"kind":"system/error"`)) {
					p.refused.Add(1)
				}
			}
		}()
	}
	joined := time.Since(peak.start)

	start := time.Now()
	var senders sync.WaitGroup
	sendErr := make(chan error, l.Pods)
	for i, p := range pods {
		senders.Add(1)
		go func() {
			defer senders.Done()
			buf := make([]byte, 0, l.Size+64)
			for seq := 0; seq < l.Envelopes; seq++ {
				buf = stalledEnvelope(buf[:0], l.Size, seq)
				if err := p.sender.Write(ctx, buf); err != nil {
					sendErr <- fmt.Errorf("sender %d, envelope %d: %w", i, seq, err)
					return
				}
			}
		}()
	}
	senders.Wait()
	sent := time.Since(start)
	select {
	case err := <-sendErr:
		return err
	default:
	}

	// Everything written; wait until the gateway has accepted it all (or
	// its count stops moving: a refusal is reported below).
	want := float64(l.Pods * l.Envelopes)
	var accepted float64
	last, lastMove := -1.0, time.Now()
	for {
		m, err := scrape(ctx, s.addr)
		if err != nil {
			return err
		}
		accepted = m.get("mcpp_envelopes_in_total")
		if accepted >= want || time.Since(lastMove) > 5*time.Second {
			break
		}
		if accepted != last {
			last, lastMove = accepted, time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	acceptedIn := time.Since(start)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(l.Settle):
	}
	end, err := rss(s.pid())
	if err != nil {
		return err
	}
	m, err := scrape(ctx, s.addr)
	if err != nil {
		return err
	}
	peak.halt()
	top, topAt, samples := peak.result()

	var refused int64
	for _, p := range pods {
		refused += p.refused.Load()
	}
	fates := readAgain(ctx, pods, 10*time.Second)
	counts, read := tallyFates(fates)

	fmt.Fprintf(b.out, "joined in %.1f s; sent in %.1f s; accepted %.0f of %.0f envelopes in %.1f s; %d refused\n",
		joined.Seconds(), sent.Seconds(), accepted, want, acceptedIn.Seconds(), refused)
	fmt.Fprintf(b.out, "RSS: at start %s, peak %s (reached %.1f s after the start; %d samples), end %s (%s after the last envelope was accepted)\n",
		bytesString(rss0), bytesString(top), topAt.Seconds(), samples, bytesString(end), l.Settle)
	fmt.Fprintf(b.out, "peak above the start per stalled reader: %s\n", bytesString((top-rss0)/int64(l.Pods)))
	hist := "no history metric (this gateway keeps none)"
	if v, ok := m.sum("mcpp_history_bytes"); ok {
		hist = fmt.Sprintf("history holds %s in %.0f entries (frames held %.0f times, republished late %.0f)", bytesString(int64(v)),
			m.get("mcpp_history_entries"), m.get("mcpp_history_holds_total"), m.get("mcpp_history_late_total"))
	}
	fmt.Fprintf(b.out, "at the end: heap in use %s, %s, %.0f connections\n",
		bytesString(int64(m.get("go_memstats_heap_inuse_bytes"))), hist, m.get("mcpp_connections"))
	fmt.Fprintf(b.out, "cuts (gateway's /metrics): %s\n", m.cuts())
	fmt.Fprintf(b.out, "stalled readers, reading again at the end: %s; %d envelopes read (what the sockets held, or the queue when not cut)\n",
		formatCounts(counts, "none"), read)
	fmt.Fprintf(b.out, "| %d | %d × %d B | %s | %s | %s | %s |\n",
		l.Pods, l.Envelopes, l.Size, bytesString(rss0), bytesString(top), bytesString(end), m.cuts())
	return nil
}

func argsNote(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return ", and " + strings.Join(args, " ")
}

// readAgain has every stalled reader read until its connection ends, or
// until it has waited for a message for idle: how did it end?
func readAgain(ctx context.Context, pods []*stalledPod, idle time.Duration) []fate {
	fates := make([]fate, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &fates[i]
			var m []byte
			for {
				rctx, cancel := context.WithTimeout(ctx, idle)
				var err error
				m, err = p.reader.Read(rctx, m[:0])
				gaveUp := err != nil && rctx.Err() != nil && ctx.Err() == nil
				cancel()
				if err != nil {
					f.how = fateOf(err, gaveUp)
					return
				}
				if bytes.Contains(m, stalledKind) {
					f.envelopes++
				}
			}
		}()
	}
	wg.Wait()
	return fates
}
