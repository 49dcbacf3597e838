package bench

import (
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
