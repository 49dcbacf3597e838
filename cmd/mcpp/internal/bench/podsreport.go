package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// podsRow is one --pods run's figures, or (Round 0) the medians of a
// server's runs. It is what the text shows and what --json writes.
type podsRow struct {
	Server     string         `json:"server"`
	Round      int            `json:"round,omitempty"` // 0: the medians of Runs runs
	Runs       int            `json:"runs,omitempty"`
	Joins      int            `json:"joins"`
	Admitted   int            `json:"admitted"`
	Refusals   map[string]int `json:"refusals,omitempty"`
	FirstError string         `json:"first_error,omitempty"`
	JoinS      float64        `json:"join_s"`
	// The server's RSS before the joins, joined and after the traffic,
	// and its growth a pod (0: not measured, a server bench did not
	// start).
	RSSBeforeMiB       float64      `json:"rss_before_mib"`
	RSSJoinedMiB       float64      `json:"rss_joined_mib"`
	RSSEndMiB          float64      `json:"rss_after_traffic_mib"`
	MemoryAPodKiB      float64      `json:"memory_a_pod_kib"`
	MemoryAPodAfterKiB float64      `json:"memory_a_pod_after_traffic_kib"`
	Sent               int64        `json:"sent"`
	Expected           int64        `json:"expected"`
	Received           int64        `json:"received"`
	Lost               int64        `json:"lost"`
	Twice              int64        `json:"twice"`
	OutOfOrder         int64        `json:"out_of_order"`
	Cut                int64        `json:"connections_cut"`
	P50Ms              float64      `json:"p50_ms"`
	P99Ms              float64      `json:"p99_ms"`
	P999Ms             float64      `json:"p999_ms"`
	MaxMs              float64      `json:"max_ms"`
	WindowS            float64      `json:"window_s"`
	Delivered          int64        `json:"deliveries_in_window"`
	ServerCores        float64      `json:"server_cores"`
	CPUADeliveryUs     float64      `json:"cpu_a_delivery_us"` // the server's CPU time in the window over the deliveries in it
	ClientCores        float64      `json:"client_cores"`
	GC                 *podsGC      `json:"server_gc"` // nil: not traced (a server bench did not start)
	Client             podsClientGC `json:"client_gc"`
}

// podsGC is what the server's collector did in the window (gcSummary).
type podsGC struct {
	Collections    int     `json:"collections"`
	MarkWallSumMs  float64 `json:"mark_wall_sum_ms"`
	MarkWallMaxMs  float64 `json:"mark_wall_max_ms"`
	StopMaxMs      float64 `json:"stop_max_ms"`
	AssistCPUSumMs float64 `json:"assist_cpu_sum_ms"`
	AssistCPUMaxMs float64 `json:"assist_cpu_max_ms"`
	LiveHeapMaxMB  int     `json:"live_heap_max_mb"`
	InLife         int     `json:"collections_in_life"`
}

// podsClientGC is what the bench client's collector did (clientGC).
type podsClientGC struct {
	CollectorOff   bool    `json:"collector_off"`
	MemoryLimitMiB float64 `json:"memory_limit_mib"`
	Collections    uint64  `json:"collections"`
	Pauses         uint64  `json:"pauses"`
	PauseMaxMs     float64 `json:"pause_max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMs(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func newPodsRow(server string, round int, l podsLoad, r podsResult, gc *gcSummary) podsRow {
	window := r.WindowEnd.Sub(r.WindowStart)
	row := podsRow{Server: server, Round: round, Joins: r.Joins, Admitted: r.Admitted, Refusals: r.Refusals,
		FirstError: r.FirstError, JoinS: r.JoinTime.Seconds(),
		Sent: r.Sent, Expected: r.Expected, Received: r.Received, Lost: r.Lost, Twice: r.Twice, OutOfOrder: r.OutOfOrder, Cut: r.Cut,
		P50Ms: ms(r.Latency.quantile(0.5)), P99Ms: ms(r.Latency.quantile(0.99)), P999Ms: ms(r.Latency.quantile(0.999)), MaxMs: ms(r.Latency.maximum()),
		WindowS: window.Seconds(), Delivered: r.Delivered, ClientCores: r.Bench.Seconds() / window.Seconds(),
		Client: podsClientGC{CollectorOff: r.Client.Off, MemoryLimitMiB: float64(r.Client.Limit) / (1 << 20),
			Collections: r.Client.Collections, Pauses: r.Client.Pauses, PauseMaxMs: ms(r.Client.PauseMax)},
	}
	if len(row.Refusals) == 0 {
		row.Refusals = nil
	}
	if len(l.PIDs) > 0 {
		perPod := func(v int64) float64 { return float64(v-r.RSSBefore) / float64(l.Pods) / 1024 }
		row.RSSBeforeMiB, row.RSSJoinedMiB, row.RSSEndMiB = float64(r.RSSBefore)/(1<<20), float64(r.RSSJoined)/(1<<20), float64(r.RSSEnd)/(1<<20)
		row.MemoryAPodKiB, row.MemoryAPodAfterKiB = perPod(r.RSSJoined), perPod(r.RSSEnd)
		row.ServerCores = r.CPU.Seconds() / window.Seconds()
		if r.Delivered > 0 {
			row.CPUADeliveryUs = float64(r.CPU.Nanoseconds()) / 1000 / float64(r.Delivered)
		}
	}
	if gc != nil {
		row.GC = &podsGC{Collections: gc.Count, MarkWallSumMs: ms(gc.WallSum), MarkWallMaxMs: ms(gc.WallMax), StopMaxMs: ms(gc.StopMax),
			AssistCPUSumMs: ms(gc.AssistSum), AssistCPUMaxMs: ms(gc.AssistMax), LiveHeapMaxMB: gc.LiveMBMax, InLife: gc.InLife}
	}
	return row
}

// text is one run, as it ends.
func (r podsRow) text(l podsLoad) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, round %d:\n", r.Server, r.Round)
	fmt.Fprintf(&b, "  joins: %d of %d admitted in %s", r.Admitted, r.Joins, short(time.Duration(r.JoinS*float64(time.Second))))
	codes := make([]string, 0, len(r.Refusals))
	for code := range r.Refusals {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		fmt.Fprintf(&b, "; %d refused %s", r.Refusals[code], code)
	}
	if r.FirstError != "" {
		fmt.Fprintf(&b, " (the first: %s)", r.FirstError)
	}
	b.WriteString("\n")
	if r.RSSBeforeMiB > 0 {
		fmt.Fprintf(&b, "  RSS: %.1f MiB before, %.1f MiB joined (%.1f KiB a pod with its %d connections), %.1f MiB after the traffic (%.1f KiB a pod)\n",
			r.RSSBeforeMiB, r.RSSJoinedMiB, r.MemoryAPodKiB, l.Members, r.RSSEndMiB, r.MemoryAPodAfterKiB)
	}
	fmt.Fprintf(&b, "  envelopes: %d sent, %d deliveries expected, %d received; lost %d, twice %d, out of order %d; connections cut %d\n",
		r.Sent, r.Expected, r.Received, r.Lost, r.Twice, r.OutOfOrder, r.Cut)
	fmt.Fprintf(&b, "  latency: p50 %s p99 %s p999 %s max %s\n", short(fromMs(r.P50Ms)), short(fromMs(r.P99Ms)), short(fromMs(r.P999Ms)), short(fromMs(r.MaxMs)))
	if r.ServerCores > 0 {
		fmt.Fprintf(&b, "  CPU in the window (%s): server %.2f cores, %.1f µs a delivery (%d deliveries); bench client %.2f cores\n",
			short(time.Duration(r.WindowS*float64(time.Second))), r.ServerCores, r.CPUADeliveryUs, r.Delivered, r.ClientCores)
	}
	if g := r.GC; g != nil && g.Collections == 0 {
		fmt.Fprintf(&b, "  server's collections in the window: none (%d in its life); WARNING: lengthen the window (--duration) to see its pauses\n", g.InLife)
	} else if g != nil {
		fmt.Fprintf(&b, "  server's collections in the window: %d, marking for %s of wall time in all, %s the longest (its stops %s at most); assists %s of CPU in all, %s the most in one; live heap up to %d MB (%d collections in its life)\n",
			g.Collections, short(fromMs(g.MarkWallSumMs)), short(fromMs(g.MarkWallMaxMs)), short(fromMs(g.StopMaxMs)),
			short(fromMs(g.AssistCPUSumMs)), short(fromMs(g.AssistCPUMaxMs)), g.LiveHeapMaxMB, g.InLife)
	}
	c := r.Client
	fmt.Fprintf(&b, "  bench client's collector: off in the window and the drain (a memory limit of %.0f MiB as a guard): %d collections, %d pauses",
		c.MemoryLimitMiB, c.Collections, c.Pauses)
	if c.Pauses > 0 {
		fmt.Fprintf(&b, ", the longest under %s", short(fromMs(c.PauseMaxMs)))
	}
	b.WriteString("\n")
	return b.String()
}

// podsReport gathers a --pods command's runs.
type podsReport struct {
	plan    podsPlan
	sources *sourceAddrs
	runs    []podsRow
}

func newPodsReport(p podsPlan, sources *sourceAddrs) *podsReport {
	return &podsReport{plan: p, sources: sources}
}

func (rep *podsReport) add(r podsRow) { rep.runs = append(rep.runs, r) }

func (rep *podsReport) labels() []string {
	var s []string
	for _, srv := range rep.plan.servers {
		s = append(s, srv.label)
	}
	return s
}

func (rep *podsReport) header() string {
	l, p := rep.plan.load, rep.plan
	var b strings.Builder
	fmt.Fprintf(&b, "# --pods %d --members %d: %d connections from %s; envelopes a second per pod: %.3g (%.0f in all), %d B; a window of %s\n",
		l.Pods, l.Members, l.Pods*l.Members, rep.sources, l.Rate, l.Rate*float64(l.Pods), l.Size, l.Duration)
	if len(p.remote) > 0 {
		fmt.Fprintf(&b, "# %d round(s) against %d running node(s): no RSS, CPU or collections of theirs\n", p.rounds, len(p.remote))
	} else {
		fmt.Fprintf(&b, "# %d round(s) of %s: one server at a time, each a fresh process, each Go server with GODEBUG=gctrace=1 (its collections whose mark overlaps the window are counted)\n",
			p.rounds, strings.Join(rep.labels(), ", "))
	}
	b.WriteString("# the bench client's own collector is off in each window and its drain (debug.SetGCPercent(-1), a memory limit as a guard); what it did anyway is reported\n")
	return b.String()
}

// medians is a row a server: the medians of its runs, but for joins
// admitted (the fewest in a run) and envelopes lost (the most).
func (rep *podsReport) medians() []podsRow {
	var out []podsRow
	for _, label := range rep.labels() {
		var runs []podsRow
		for _, r := range rep.runs {
			if r.Server == label {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			continue
		}
		med := func(f func(podsRow) float64) float64 {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = f(r)
			}
			sort.Float64s(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		m := podsRow{Server: label, Runs: len(runs), Joins: runs[0].Joins,
			Admitted: slices.MinFunc(runs, func(a, b podsRow) int { return a.Admitted - b.Admitted }).Admitted,
			Lost:     slices.MaxFunc(runs, func(a, b podsRow) int { return int(a.Lost - b.Lost) }).Lost,
			JoinS:    med(func(r podsRow) float64 { return r.JoinS }),
			P50Ms:    med(func(r podsRow) float64 { return r.P50Ms }), P99Ms: med(func(r podsRow) float64 { return r.P99Ms }),
			P999Ms: med(func(r podsRow) float64 { return r.P999Ms }), MaxMs: med(func(r podsRow) float64 { return r.MaxMs }),
			RSSBeforeMiB:       med(func(r podsRow) float64 { return r.RSSBeforeMiB }),
			RSSJoinedMiB:       med(func(r podsRow) float64 { return r.RSSJoinedMiB }),
			RSSEndMiB:          med(func(r podsRow) float64 { return r.RSSEndMiB }),
			MemoryAPodKiB:      med(func(r podsRow) float64 { return r.MemoryAPodKiB }),
			MemoryAPodAfterKiB: med(func(r podsRow) float64 { return r.MemoryAPodAfterKiB }),
			WindowS:            med(func(r podsRow) float64 { return r.WindowS }),
			ServerCores:        med(func(r podsRow) float64 { return r.ServerCores }),
			CPUADeliveryUs:     med(func(r podsRow) float64 { return r.CPUADeliveryUs }),
			ClientCores:        med(func(r podsRow) float64 { return r.ClientCores }),
		}
		if runs[0].GC != nil {
			gc := func(f func(podsGC) float64) float64 { return med(func(r podsRow) float64 { return f(*r.GC) }) }
			m.GC = &podsGC{
				Collections:    int(gc(func(g podsGC) float64 { return float64(g.Collections) })),
				MarkWallSumMs:  gc(func(g podsGC) float64 { return g.MarkWallSumMs }),
				MarkWallMaxMs:  gc(func(g podsGC) float64 { return g.MarkWallMaxMs }),
				StopMaxMs:      gc(func(g podsGC) float64 { return g.StopMaxMs }),
				AssistCPUSumMs: gc(func(g podsGC) float64 { return g.AssistCPUSumMs }),
				AssistCPUMaxMs: gc(func(g podsGC) float64 { return g.AssistCPUMaxMs }),
				LiveHeapMaxMB:  int(gc(func(g podsGC) float64 { return float64(g.LiveHeapMaxMB) })),
				InLife:         int(gc(func(g podsGC) float64 { return float64(g.InLife) })),
			}
		}
		for _, r := range runs {
			m.Client.CollectorOff = r.Client.CollectorOff
			m.Client.Collections += r.Client.Collections
			m.Client.Pauses += r.Client.Pauses
			m.Client.PauseMaxMs = max(m.Client.PauseMaxMs, r.Client.PauseMaxMs)
		}
		out = append(out, m)
	}
	return out
}

// table is the servers side by side, then each against the gateway.
func (rep *podsReport) table() string {
	meds := rep.medians()
	if len(meds) == 0 {
		return ""
	}
	w := len("gateway/")
	for _, m := range meds {
		w = max(w, len("gateway/"+m.Server))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "(medians of %d round(s); joins admitted: the fewest in a run, lost: the most)\n", rep.plan.rounds)
	fmt.Fprintf(&b, "%-*s %15s %9s %9s %9s %12s %14s %7s %11s %14s %14s %12s\n", w, "server",
		"joins admitted", "p50", "p99", "max", "memory a pod", "CPU a delivery", "lost", "server GCs", "GC mark wall", "longest mark", "GC assists")
	for _, m := range meds {
		mem, cpu := "-", "-"
		if m.RSSBeforeMiB > 0 {
			mem, cpu = fmt.Sprintf("%.1f KiB", m.MemoryAPodKiB), fmt.Sprintf("%.1f µs", m.CPUADeliveryUs)
		}
		gcs, wall, longest, assist := "-", "-", "-", "-"
		if g := m.GC; g != nil {
			gcs, wall, longest, assist = fmt.Sprint(g.Collections), short(fromMs(g.MarkWallSumMs)).String(),
				short(fromMs(g.MarkWallMaxMs)).String(), short(fromMs(g.AssistCPUSumMs)).String()
		}
		fmt.Fprintf(&b, "%-*s %15s %9s %9s %9s %12s %14s %7d %11s %14s %14s %12s\n", w, m.Server,
			fmt.Sprintf("%d/%d", m.Admitted, m.Joins), short(fromMs(m.P50Ms)), short(fromMs(m.P99Ms)), short(fromMs(m.MaxMs)),
			mem, cpu, m.Lost, gcs, wall, longest, assist)
	}
	g := meds[0]
	for _, m := range meds[1:] {
		fmt.Fprintf(&b, "%-*s p99 %.2f, max %.2f, memory a pod %.2f, CPU a delivery %.2f\n", w, "gateway/"+m.Server,
			ratio(g.P99Ms, m.P99Ms), ratio(g.MaxMs, m.MaxMs), ratio(g.MemoryAPodKiB, m.MemoryAPodKiB), ratio(g.CPUADeliveryUs, m.CPUADeliveryUs))
	}
	var collections, pauses uint64
	var longest float64
	for _, m := range meds {
		collections, pauses, longest = collections+m.Client.Collections, pauses+m.Client.Pauses, max(longest, m.Client.PauseMaxMs)
	}
	fmt.Fprintf(&b, "bench client: its collector off in every window; it collected %d times there in all runs, %d pauses", collections, pauses)
	if pauses > 0 {
		fmt.Fprintf(&b, ", the longest under %s", short(fromMs(longest)))
	}
	b.WriteString("\n")
	return b.String()
}

// podsJSON is what --json writes: the load, every run, the medians.
type podsJSON struct {
	Pods            int       `json:"pods"`
	Members         int       `json:"members"`
	PodRate         float64   `json:"pod_rate"`
	Size            int       `json:"size"`
	WindowS         float64   `json:"window_s"`
	Rounds          int       `json:"rounds"`
	Servers         []string  `json:"servers"`
	Sources         string    `json:"sources"`
	ServerGC        string    `json:"server_gc"`
	ClientCollector string    `json:"client_collector"`
	Runs            []podsRow `json:"runs"`
	Medians         []podsRow `json:"medians"`
}

func (rep *podsReport) writeJSON(w io.Writer) error {
	l := rep.plan.load
	serverGC := "GODEBUG=gctrace=1; collections whose mark overlaps the window"
	if len(rep.plan.remote) > 0 {
		serverGC = "not traced: running nodes"
	}
	out := podsJSON{Pods: l.Pods, Members: l.Members, PodRate: l.Rate, Size: l.Size, WindowS: l.Duration.Seconds(),
		Rounds: rep.plan.rounds, Servers: rep.labels(), Sources: rep.sources.String(), ServerGC: serverGC,
		ClientCollector: "off in each window and its drain (debug.SetGCPercent(-1), a memory limit as a guard)",
		Runs:            rep.runs, Medians: rep.medians()}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
