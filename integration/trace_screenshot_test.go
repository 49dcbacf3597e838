package integration

import (
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// traceScreenshot draws the trace Jaeger holds as a waterfall (each span
// a bar at its time, under its parent, with its service and the tags a
// reader looks for) in real headless Chromium, and takes the picture the
// README's "Seeing inside" shows: docs/trace.png, saved with
// MCPP_VIEWER_SCREENSHOT=1. The Jaeger built from its Go module has no UI
// (its release builds embed one), so the page is drawn from its query
// API's answer, which is what Jaeger's own UI draws from.
func traceScreenshot(t *testing.T, traceID string, spans []*harness.JaegerSpan) {
	t.Helper()
	page := waterfall(traceID, spans)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	b := harness.NewBrowser(t, harness.BrowserOpts{Width: 1400, Height: 120 + 34*len(spans)})
	b.Open(srv.URL)
	b.WaitFor("the trace drawn", fmt.Sprintf("document.querySelectorAll('.span').length == %d", len(spans)), 10*time.Second)
	saveScreenshot(t, b, "trace.png")
}

// row is a span as the waterfall draws it.
type row struct {
	Service, Name, Tags string
	Depth               int
	Left, Width         float64 // percent of the lane: 88 for the whole trace
	Duration            string
	Color               string
}

var serviceColors = map[string]string{"mcp-host": "#7c5cbf", "mcpp-gateway": "#2f7ed8", "mcpp-bridge": "#e07b00", "gomcpserver": "#2e9e57"}

// shownTags are the tags the waterfall writes beside a span.
var shownTags = []string{"mcpp.node", "mcpp.kind", "mcpp.sender", "messaging.batch.message_count", "mcpp.call.answered_by",
	"mcpp.proposal.state", "mcpp.proposal.decided_by", "mcpp.proposal.scope", "mcpp.proposal.wait_ms", "gen_ai.tool.name"}

// waterfall is the page of a trace: its spans in tree order, children
// under their parent in time order.
func waterfall(traceID string, spans []*harness.JaegerSpan) []byte {
	start, end := spans[0].StartTime, spans[0].StartTime+spans[0].Duration
	children := map[string][]*harness.JaegerSpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		start, end = min(start, s.StartTime), max(end, s.StartTime+s.Duration)
		ids[s.SpanID] = true
	}
	for _, s := range spans {
		p := s.Parent()
		if !ids[p] {
			p = ""
		}
		children[p] = append(children[p], s)
	}
	total := float64(max(end-start, 1))
	var rows []row
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b *harness.JaegerSpan) int { return int(a.StartTime - b.StartTime) })
		for _, s := range kids {
			var tags []string
			for _, k := range shownTags {
				if v := s.Tag(k); v != "" {
					tags = append(tags, strings.TrimPrefix(strings.TrimPrefix(k, "mcpp."), "messaging.")+"="+v)
				}
			}
			color := serviceColors[s.Service]
			if color == "" {
				color = "#888"
			}
			rows = append(rows, row{Service: s.Service, Name: s.OperationName, Tags: strings.Join(tags, "  "), Depth: depth,
				Left: 88 * float64(s.StartTime-start) / total, Width: max(88*float64(s.Duration)/total, 0.3), // room for the duration
				Duration: (time.Duration(s.Duration) * time.Microsecond).Round(10 * time.Microsecond).String(), Color: color})
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	services := map[string]bool{}
	for _, s := range spans {
		services[s.Service] = true
	}
	var b strings.Builder
	_ = waterfallPage.Execute(&b, map[string]any{"Trace": traceID, "Rows": rows, "Spans": len(spans), "Services": len(services),
		"Total": (time.Duration(end-start) * time.Microsecond).Round(time.Millisecond).String()})
	return []byte(b.String())
}

var waterfallPage = template.Must(template.New("trace").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>trace {{.Trace}}</title><style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 16px; margin: 0 0 4px; } .sub { color: #666; margin-bottom: 12px; }
.span { display: grid; grid-template-columns: 470px 1fr; align-items: center; height: 34px; border-bottom: 1px solid #eee; }
.label { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.svc { display: inline-block; padding: 1px 6px; border-radius: 3px; color: #fff; font-size: 11px; margin-right: 6px; }
.tags { color: #666; font-size: 11px; display: block; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.lane { position: relative; height: 16px; } .bar { position: absolute; height: 14px; border-radius: 2px; }
.dur { position: absolute; font-size: 11px; color: #444; top: -1px; padding-left: 4px; white-space: nowrap; }
</style></head><body>
<h1>A pod's tool call, one trace: {{.Trace}}</h1>
<div class="sub">{{.Spans}} spans, {{.Services}} services, {{.Total}}: the MCP host's call, the gateway's proposal and its approval, the relayed request, mcpp bridge, the server, the answer (from Jaeger's query API)</div>
{{range .Rows}}<div class="span"><div class="label" style="padding-left: {{.Depth}}2px"><span class="svc" style="background: {{.Color}}">{{.Service}}</span>{{.Name}}<span class="tags">{{.Tags}}</span></div>
<div class="lane"><div class="bar" style="left: {{.Left}}%; width: {{.Width}}%; background: {{.Color}}"></div><div class="dur" style="left: calc({{.Left}}% + {{.Width}}%)">{{.Duration}}</div></div></div>
{{end}}</body></html>`))
