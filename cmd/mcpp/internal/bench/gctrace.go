package bench

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Go server that bench starts for --pods runs with GODEBUG=gctrace=1: its
// runtime writes one line to stderr at the end of each collection,
//
//	gc 12 @3.456s 2%: 0.026+390+0.10 ms clock, 0.21+245/120/0+0.82 ms cpu, 110->115->98 MB, 120 MB goal, 41 MB stacks, 0 MB globals, 2 P
//
// whose clock triple is the wall time of sweep termination (a stop),
// the concurrent mark and mark termination (a stop), and whose CPU
// fields after the first "+" are the CPU time of mark assists (taken
// from the goroutines that allocate: deliveries wait meanwhile), of the
// background mark workers, and of idle marking. The gcTracer reads
// those lines out of the server's stderr as they come; a summary of the
// collections whose mark overlaps the measurement window says what the
// server's collector cost the deliveries there.

// gcTraceEnv is what GODEBUG gets for a traced server.
const gcTraceEnv = "gctrace=1"

// gcCycle is one collection a server reported.
type gcCycle struct {
	At     time.Time     // when its line arrived: the end of its mark termination, give or take the pipe
	Wall   time.Duration // sweep termination, concurrent mark and mark termination, wall clock
	Stops  time.Duration // the two stops of that wall time
	Assist time.Duration // CPU time of mark assists
	LiveMB int           // heap marked live
}

// gcTracer is a traced server's stderr: it keeps the collections and
// passes every other line on to pass (the server's own logs).
type gcTracer struct {
	pass io.Writer

	mu     sync.Mutex
	line   []byte // a line not ended yet
	cycles []gcCycle
}

func newGCTracer(pass io.Writer) *gcTracer { return &gcTracer{pass: pass} }

// Write takes what the server wrote to stderr, in whatever pieces the
// pipe delivers it: the runtime writes a gctrace line in several writes.
func (t *gcTracer) Write(p []byte) (int, error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := p
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.line = append(t.line, rest...)
			return len(p), nil
		}
		t.line = append(t.line, rest[:i+1]...)
		rest = rest[i+1:]
		if c, ok := parseGCLine(string(t.line)); ok {
			c.At = now
			t.cycles = append(t.cycles, c)
		} else {
			_, _ = t.pass.Write(t.line)
		}
		t.line = t.line[:0]
	}
}

// parseGCLine reads one gctrace line (see above); false when line is not
// one, or not in the format this reads.
func parseGCLine(line string) (gcCycle, bool) {
	var c gcCycle
	if !strings.HasPrefix(line, "gc ") {
		return c, false
	}
	// "gc N @Ts P%: " or "gc N @Ts P% (checking for goroutine leaks): "
	_, rest, ok := strings.Cut(line, "%")
	if !ok {
		return c, false
	}
	if _, rest, ok = strings.Cut(rest, ": "); !ok {
		return c, false
	}
	clock, rest, ok := strings.Cut(rest, " ms clock, ")
	if !ok {
		return c, false
	}
	cpu, rest, ok := strings.Cut(rest, " ms cpu, ")
	if !ok {
		return c, false
	}
	heap, _, ok := strings.Cut(rest, " MB")
	if !ok {
		return c, false
	}
	phases := strings.Split(clock, "+")
	cpus := strings.Split(cpu, "+") // stop, assist/background/idle, stop
	heaps := strings.Split(heap, "->")
	if len(phases) != 3 || len(cpus) != 3 || len(heaps) != 3 {
		return c, false
	}
	var wall [3]time.Duration
	for i, s := range phases {
		if wall[i], ok = parseMillis(s); !ok {
			return c, false
		}
	}
	assist, _, _ := strings.Cut(cpus[1], "/")
	if c.Assist, ok = parseMillis(assist); !ok {
		return c, false
	}
	live, err := strconv.Atoi(heaps[2])
	if err != nil {
		return c, false
	}
	c.Wall, c.Stops, c.LiveMB = wall[0]+wall[1]+wall[2], wall[0]+wall[2], live
	return c, true
}

func parseMillis(s string) (time.Duration, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return time.Duration(v * float64(time.Millisecond)), true
}

// gcSummary is what a server's collector did in a window.
type gcSummary struct {
	Count                int           // collections whose mark overlapped the window
	WallSum, WallMax     time.Duration // their mark's wall time (stops included)
	StopMax              time.Duration // the longest of their stops
	AssistSum, AssistMax time.Duration // their assists' CPU time
	LiveMBMax            int           // the largest heap they marked live
	InLife               int           // collections in the server's whole life, to show that the trace was read
}

// window sums the collections whose mark overlapped [from, to].
func (t *gcTracer) window(from, to time.Time) gcSummary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := gcSummary{InLife: len(t.cycles)}
	for _, c := range t.cycles {
		if c.At.Before(from) || c.At.Add(-c.Wall).After(to) {
			continue
		}
		s.Count++
		s.WallSum += c.Wall
		s.AssistSum += c.Assist
		s.WallMax = max(s.WallMax, c.Wall)
		s.StopMax = max(s.StopMax, c.Stops)
		s.AssistMax = max(s.AssistMax, c.Assist)
		s.LiveMBMax = max(s.LiveMBMax, c.LiveMB)
	}
	return s
}
