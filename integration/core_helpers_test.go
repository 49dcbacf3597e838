package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Helpers of the core tests (core_test.go, auth_test.go, flow_test.go,
// shutdown_test.go).

// httpGet fetches url and returns its status and body.
func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricsOf fetches base+"/metrics" and returns every sample as
// series -> value, where series is the name with its labels as printed
// (`mcpp_errors_total{code="invalid_json"}`).
func metricsOf(t *testing.T, base string) map[string]float64 {
	t.Helper()
	status, body, err := httpGet(base + "/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		for _, m := range f.Metric {
			series := name
			if len(m.Label) > 0 {
				labels := make([]string, len(m.Label))
				for i, l := range m.Label {
					labels[i] = l.GetName() + `="` + labelEscaper.Replace(l.GetValue()) + `"`
				}
				series += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[series] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[series] = m.Gauge.GetValue()
			case m.Untyped != nil:
				out[series] = m.Untyped.GetValue()
			}
		}
	}
	return out
}

// labelEscaper writes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// metric is one series of /metrics, or -1 when it is absent.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	if v, ok := metricsOf(t, base)[series]; ok {
		return v
	}
	return -1
}

// metricOrZero is one series of /metrics, or 0 when it is absent, as a
// counter is that was never incremented (a labelled series appears only
// once it is).
func metricOrZero(t *testing.T, base, series string) float64 {
	t.Helper()
	return metricsOf(t, base)[series]
}

// writeFile writes content to a new file in a test directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// nextOf returns the next envelope that is not presence, failing after 5s.
func (c *client) nextOf() msg {
	c.t.Helper()
	m := c.nextNonPresence(5 * time.Second)
	if m == nil {
		c.t.Fatalf("%s: no envelope within 5s", c.ID)
	}
	return m
}

// expectEnvelope returns the next envelope that is not presence and checks
// that it has this kind and id.
func (c *client) expectEnvelope(kind, id string) msg {
	c.t.Helper()
	m := c.nextOf()
	if m.kind() != kind || m.str("id") != id {
		c.t.Fatalf("%s: got %s id=%q (%v), want %s id=%q", c.ID, m.kind(), m.str("id"), m, kind, id)
	}
	return m
}

// presenceOf checks that m is a presence event of this kind about id.
func presenceOf(t *testing.T, m msg, event, id string) {
	t.Helper()
	if m == nil || m.kind() != "system/presence" {
		t.Fatalf("got %v, want system/presence %s of %s", m, event, id)
	}
	pl := m.payload()
	who, _ := pl["participant"].(map[string]any)
	if pl["event"] != event || who["id"] != id {
		t.Fatalf("got presence %v, want %s of %s", pl, event, id)
	}
	if m.str("from") != "system:gateway" {
		t.Fatalf("presence from %q, want system:gateway", m.str("from"))
	}
}

// idsOf returns the "id" of each object of a JSON array.
func idsOf(v any) []string {
	list, _ := v.([]any)
	out := []string{}
	for _, e := range list {
		o, _ := e.(map[string]any)
		s, _ := o["id"].(string)
		out = append(out, s)
	}
	return out
}

// jsonEqual compares a decoded JSON value with a Go value by their JSON.
func jsonEqual(got any, want any) bool {
	a, _ := json.Marshal(got)
	var x, y any
	_ = json.Unmarshal(a, &x)
	b, _ := json.Marshal(want)
	_ = json.Unmarshal(b, &y)
	return reflect.DeepEqual(x, y)
}

// seqOf is the "seq" number of a payload.
func seqOf(m msg) int {
	f, ok := m.payload()["seq"].(float64)
	if !ok {
		return -1
	}
	return int(f)
}

// pad returns n bytes of filler.
func pad(n int) string { return strings.Repeat("x", n) }

// envelopeOfSize builds an envelope of kind whose JSON text is exactly n
// bytes long (n must be at least 64).
func envelopeOfSize(t *testing.T, id, kind string, n int) []byte {
	t.Helper()
	head := fmt.Sprintf(`{"id":%q,"kind":%q,"payload":{"pad":"`, id, kind)
	tail := `"}}`
	fill := n - len(head) - len(tail)
	if fill < 0 {
		t.Fatalf("envelope of %d bytes is too small", n)
	}
	b := []byte(head + pad(fill) + tail)
	if len(b) != n || !json.Valid(b) {
		t.Fatalf("envelopeOfSize: built %d bytes", len(b))
	}
	return b
}

// relayed returns the next envelope that is not presence (checking its id
// unless id is "") and the raw text message that carried it. The client
// must not be batching.
func (c *client) relayed(id string) (msg, []byte) {
	c.t.Helper()
	m := c.nextOf()
	if id != "" && m.str("id") != id {
		c.t.Fatalf("%s: got %v, want id %q", c.ID, m, id)
	}
	// The raw message comes before its decoded envelope; older raw
	// messages (already read as envelopes) are skipped.
	for {
		select {
		case b := <-c.raw:
			var r msg
			if json.Unmarshal(b, &r) == nil && r.str("id") == m.str("id") {
				return m, b
			}
		case <-time.After(5 * time.Second):
			c.t.Fatalf("%s: raw message of %q not found", c.ID, m.str("id"))
		}
	}
}

// expectErr is expectError skipping presence events.
func (c *client) expectErr(code string) msg {
	c.t.Helper()
	m := c.nextOf()
	if m.errCode() != code {
		c.t.Fatalf("%s: got %v, want system/error %q", c.ID, m, code)
	}
	return m
}
