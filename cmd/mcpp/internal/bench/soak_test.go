package bench

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestCheckSoak(t *testing.T) {
	for _, c := range []struct {
		p             soakPlan
		remote, other bool
		want          string
	}{
		{p: soakPlan{Warmup: 2 * time.Minute, Duration: 30 * time.Minute, Settle: 5 * time.Minute, Every: time.Minute}},
		{p: soakPlan{Duration: 10 * time.Second, Every: time.Second}},
		{p: soakPlan{Duration: 9 * time.Second, Every: time.Minute}, want: "at least 10s"},
		{p: soakPlan{Duration: time.Minute, Settle: -1, Every: time.Minute}, want: "--settle"},
		{p: soakPlan{Duration: time.Minute, Warmup: -1, Every: time.Minute}, want: "--soak-warmup"},
		{p: soakPlan{Duration: time.Minute, Every: time.Millisecond}, want: "--sample-every"},
		{p: soakPlan{Duration: time.Minute, Every: time.Minute}, remote: true, want: "--gateway"},
		{p: soakPlan{Duration: time.Minute, Every: time.Minute}, other: true, want: "does not go with"},
	} {
		got := checkSoak(c.p, c.remote, c.other)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("checkSoak(%+v) = %q, want %q", c, got, c.want)
		}
	}
	for _, args := range [][]string{
		{"--soak", "5s"},
		{"--soak", "-1m"},
		{"--soak", "1m", "--gateway", "ws://127.0.0.1:1"},
		{"--soak", "1m", "--peer", "nats"},
		{"--soak", "1m", "--sample-every", "10ms"},
		{"--soak", "1m", "--settle", "-1s"},
		{"--soak", "1m", "--soak-warmup", "-1s"},
	} {
		var stderr strings.Builder
		if code := Run(args, io.Discard, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("Run(%q) = %d (%q), want 2 and a message", args, code, stderr.String())
		}
	}
}

func TestCompareEnds(t *testing.T) {
	start := soakSample{RSS: 20 << 20, FDs: 12, Heap: 4 << 20, Goroutines: 30}
	back := soakSample{RSS: 34 << 20, FDs: 14, Heap: 7 << 20, Goroutines: 35}
	for _, c := range compareEnds(start, back) {
		if !c.Back {
			t.Errorf("%s: %s → %s is within its slack (%s) but not back", c.Name, c.Start, c.End, c.Slack)
		}
	}
	leaked := soakSample{RSS: 200 << 20, FDs: 400, Heap: 90 << 20, Goroutines: 3000, Connections: 1, Pods: 2, Contexts: 5, HistEntries: 10}
	for _, c := range compareEnds(start, leaked) {
		if c.Back {
			t.Errorf("%s: %s → %s is called back", c.Name, c.Start, c.End)
		}
	}
	// The slack of a large heap is a fraction of it.
	big := soakSample{Heap: 100 << 20}
	for _, c := range compareEnds(big, soakSample{Heap: 120 << 20}) {
		if c.Name == "heap in use" && (!c.Back || c.Change != "+20.0%") {
			t.Errorf("heap 100 → 120 MiB: back %v, change %s", c.Back, c.Change)
		}
	}
	for _, c := range compareEnds(big, soakSample{Heap: 130 << 20}) {
		if c.Name == "heap in use" && c.Back {
			t.Error("heap 100 → 130 MiB is called back")
		}
	}
}

func TestSoakRowAndTally(t *testing.T) {
	prev := soakSample{At: time.Minute, CPU: 10 * time.Second}
	s := soakSample{At: 2 * time.Minute, Phase: "traffic", RSS: 30 << 20, Heap: 8 << 20, Goroutines: 42, FDs: 17,
		Connections: 25, Pods: 6, Contexts: 3, HistEntries: 900, HistBytes: 2 << 20, EnvelopesIn: 12345, Cuts: 2, CPU: 22 * time.Second}
	row := s.row(prev)
	for _, want := range []string{"2:00", "traffic", "30.0 MiB", "8.0 MiB", "42", "17", "25", "900 / 2.0 MiB", "12345", "20%"} {
		if !strings.Contains(row, want) {
			t.Errorf("row lacks %q: %s", want, row)
		}
	}
	if got := s.row(s); !strings.HasSuffix(got, " -") {
		t.Errorf("a row with no time before it has a CPU share: %s", got)
	}
	for d, want := range map[time.Duration]string{0: "0:00", 90 * time.Second: "1:30", 31*time.Minute + 4500*time.Millisecond: "31:05", -2 * time.Second: "-0:02"} {
		if got := clock(d); got != want {
			t.Errorf("clock(%v) = %q, want %q", d, got, want)
		}
	}

	tl := newTally()
	tl.add("joins", 2)
	tl.add("joins", 3)
	for i := 0; i < 40; i++ {
		tl.problem("problem %d", i)
	}
	if tl.get("joins") != 5 || tl.nproblems != 40 || len(tl.problems) != 30 {
		t.Errorf("joins %d, %d problems (%d kept)", tl.get("joins"), tl.nproblems, len(tl.problems))
	}
	var out strings.Builder
	tl.report(&out)
	if !strings.Contains(out.String(), "joins") || !strings.Contains(out.String(), "problems: 40") {
		t.Errorf("report:\n%s", out.String())
	}
}
