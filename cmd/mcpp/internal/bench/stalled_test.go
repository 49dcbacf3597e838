package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

func TestCheckStalled(t *testing.T) {
	ok := stalledLoad{Pods: 100, Envelopes: 64, Size: 1_000_000, Settle: time.Second}
	for _, c := range []struct {
		name          string
		l             stalledLoad
		remote, other bool
		mem           int64
		want          string // part of the message; "" when accepted
	}{
		{name: "the issue's run", l: ok, mem: 20 << 30},
		{name: "memory unknown", l: ok},
		{name: "no pods", l: stalledLoad{Envelopes: 1, Size: 64}, want: "at least 1"},
		{name: "no envelopes", l: stalledLoad{Pods: 1, Size: 64}, want: "--stalled-envelopes"},
		{name: "small envelopes", l: stalledLoad{Pods: 1, Envelopes: 1, Size: 63}, want: "--size"},
		{name: "negative settle", l: stalledLoad{Pods: 1, Envelopes: 1, Size: 64, Settle: -1}, want: "--settle"},
		{name: "remote gateway", l: ok, remote: true, want: "--gateway"},
		{name: "another mode", l: ok, other: true, want: "does not go with"},
		// 6.4 GB could be held; twice that is over 10 GiB.
		{name: "too much for the machine", l: ok, mem: 10 << 30, want: "send fewer envelopes"},
	} {
		got := checkStalled(c.l, c.remote, c.other, c.mem)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: checkStalled = %q, want %q", c.name, got, c.want)
		}
	}
	if w := ok.worstCase(); w != 6_400_000_000 {
		t.Errorf("worst case %d, want 6.4 GB", w)
	}
	// Usage errors, before any gateway is started.
	for _, args := range [][]string{
		{"--stalled", "-1"},
		{"--stalled", "1", "--stalled-envelopes", "0"},
		{"--stalled", "1", "--size", "10"},
		{"--stalled", "1", "--gateway", "ws://127.0.0.1:1"},
		{"--stalled", "1", "--baseline"},
		{"--stalled", "1", "--idle", "10"},
		{"--stalled", "1", "--soak", "1m"},
		{"--stalled", "1", "--settle", "-1s"},
		{"--stalled", "1", "--size", "1000000", "--stalled-envelopes", "1000000000"}, // a petabyte
	} {
		var stderr strings.Builder
		if code := Run(args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("Run(%q) = %d (%q), want 2 and a message", args, code, stderr.String())
		}
	}
}

func TestParseMetrics(t *testing.T) {
	const text = `# HELP mcpp_cuts_total Participants cut by the gateway, by reason.
# TYPE mcpp_cuts_total counter
mcpp_cuts_total{reason="slow_consumer"} 100
mcpp_cuts_total{reason="write_timeout"} 2
mcpp_cuts_total_other 7
mcpp_envelopes_in_total 6400
go_memstats_heap_inuse_bytes 1.2345678e+07
mcpp_errors_total{code="rate_limited",note="a b"} 3
mcpp_errors_total{code="duplicate_id"} 1
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if v := m.get("mcpp_envelopes_in_total"); v != 6400 {
		t.Errorf("envelopes in = %v", v)
	}
	if v := m.get("go_memstats_heap_inuse_bytes"); v != 12345678 {
		t.Errorf("heap = %v", v)
	}
	if v, ok := m.sum("mcpp_cuts_total"); !ok || v != 102 {
		t.Errorf("sum of cuts = %v, %v; want 102 (and not the _other metric)", v, ok)
	}
	if _, ok := m.sum("mcpp_absent"); ok {
		t.Error("an absent metric has a sum")
	}
	if by := m.byLabel("mcpp_errors_total", "code"); by["rate_limited"] != 3 || by["duplicate_id"] != 1 || len(by) != 2 {
		t.Errorf("errors by code = %v", by)
	}
	if got := m.cuts(); got != "slow_consumer 100, write_timeout 2" {
		t.Errorf("cuts() = %q", got)
	}
	// The gateway before mcpp_cuts_total counted slow consumers alone.
	old, _ := parseMetrics(strings.NewReader("mcpp_slow_consumer_disconnects_total 0\n"))
	if got := old.cuts(); !strings.HasPrefix(got, "mcpp_slow_consumer_disconnects_total 0") {
		t.Errorf("old gateway: cuts() = %q", got)
	}
	if got := (metricSet{}).cuts(); got != "none counted" {
		t.Errorf("no metric: cuts() = %q", got)
	}
}

func TestPeakSampler(t *testing.T) {
	p := &peakSampler{}
	const mib = 1 << 20
	for i, v := range []int64{10 * mib, 30 * mib, 20 * mib, 31*mib - 4096, 31 * mib, 5 * mib} {
		p.add(time.Duration(i)*time.Second, v)
	}
	peak, at, n := p.result()
	if peak != 31*mib || at != time.Second || n != 6 {
		t.Errorf("peak %d at %v of %d samples, want 31 MiB, reached (within 1 MiB) at 1s, of 6", peak, at, n)
	}
	if peak, at, n := (&peakSampler{}).result(); peak != 0 || at != 0 || n != 0 {
		t.Error("no samples, yet a peak")
	}
}

func TestFatesAndEnvelope(t *testing.T) {
	for _, c := range []struct {
		err    error
		gaveUp bool
		want   string
	}{
		{&client.ClosedError{Code: wire.CloseSlowConsumer, Reason: "slow consumer"}, false, "closed 4008"},
		{fmt.Errorf("read: %w", &client.ClosedError{Code: wire.CloseGoingAway}), false, "closed 1001"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, io.EOF), false, "lost without a close frame"},
		{io.EOF, false, "lost without a close frame"},
		{io.ErrUnexpectedEOF, true, "still open"},
		{nil, false, "still open"},
	} {
		if got := fateOf(c.err, c.gaveUp); got != c.want {
			t.Errorf("fateOf(%v, %v) = %q, want %q", c.err, c.gaveUp, got, c.want)
		}
	}
	counts, n := tallyFates([]fate{{"closed 4008", 2}, {"closed 4008", 0}, {"still open", 64}})
	if counts["closed 4008"] != 2 || counts["still open"] != 1 || n != 66 {
		t.Errorf("tally %v, %d envelopes", counts, n)
	}
	if got := formatCounts(counts, "none"); got != "closed 4008 2, still open 1" {
		t.Errorf("formatCounts = %q", got)
	}
	if got := formatCounts(map[string]int{}, "none"); got != "none" {
		t.Errorf("formatCounts of nothing = %q", got)
	}
	for _, size := range []int{64, 1000, 1_000_000} {
		b := stalledEnvelope(nil, size, 12)
		if len(b) != size || !json.Valid(b) || !strings.Contains(string(b), `"kind":"stalled"`) {
			t.Errorf("envelope of %d: %d bytes, valid %v", size, len(b), json.Valid(b))
		}
	}
	for n, want := range map[int64]string{
		0: "0.0 MiB", 8 << 20: "8.0 MiB", 1536 << 20: "1.50 GiB", 12 << 30: "12.0 GiB", -(2 << 20): "-2.0 MiB",
	} {
		if got := bytesString(n); got != want {
			t.Errorf("bytesString(%d) = %q, want %q", n, got, want)
		}
	}
}
