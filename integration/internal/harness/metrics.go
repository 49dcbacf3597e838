package harness

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// HTTPGet fetches url and returns its status and body.
func HTTPGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// MetricsOf fetches base+"/metrics" and returns every sample as
// series -> value, where series is the name with its labels as printed
// (`mcpp_errors_total{code="invalid_json"}`); a histogram's as its
// _count, _sum and _bucket series, le among the labels in name order
// (`x_bucket{le="0.5",pod="lab"}`).
func MetricsOf(t *testing.T, base string) map[string]float64 {
	t.Helper()
	status, body, err := HTTPGet(base + "/metrics")
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
			labels := make([]string, len(m.Label))
			for i, l := range m.Label {
				labels[i] = l.GetName() + `="` + labelEscaper.Replace(l.GetValue()) + `"`
			}
			series := func(name string, more ...string) string {
				all := append(append([]string(nil), labels...), more...)
				if len(all) == 0 {
					return name
				}
				slices.Sort(all)
				return name + "{" + strings.Join(all, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[series(name)] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[series(name)] = m.Gauge.GetValue()
			case m.Untyped != nil:
				out[series(name)] = m.Untyped.GetValue()
			case m.Histogram != nil:
				h := m.Histogram
				out[series(name+"_count")] = float64(h.GetSampleCount())
				out[series(name+"_sum")] = h.GetSampleSum()
				for _, b := range h.Bucket {
					le := strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					out[series(name+"_bucket", `le="`+le+`"`)] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// Metric is one series of /metrics, or -1 when it is absent.
func Metric(t *testing.T, base, series string) float64 {
	t.Helper()
	if v, ok := MetricsOf(t, base)[series]; ok {
		return v
	}
	return -1
}

// MetricOrZero is one series of /metrics, or 0 when it is absent, as a
// counter is that was never incremented (a labelled series appears only
// once it is).
func MetricOrZero(t *testing.T, base, series string) float64 {
	t.Helper()
	return MetricsOf(t, base)[series]
}

// labelEscaper writes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
