package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The sample Grafana dashboard and Prometheus alerting rules of deploy/
// (issue 36, docs/protocol.md section 7) name only metrics a real
// gateway serves: a renamed metric breaks this test, not a team's alerts.

const (
	dashboardFile = "../deploy/grafana/mcpp-gateway.json"
	alertsFile    = "../deploy/prometheus/alerts.yaml"
)

// grafanaVariables are what Grafana puts in place of its variables
// before a query goes to Prometheus, as a dashboard's user would see it.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "1m", "${__rate_interval}", "1m", "$__interval", "15s", "${pod}", ".*", "$pod", ".*")

// metricNames are the metric names an expression selects, parsed with
// Prometheus' own parser.
func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		t.Fatalf("%q does not parse: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	if len(names) == 0 {
		t.Fatalf("%q selects no metric", expr)
	}
	return names
}

// TestMetricNamesOfAnExpression: the extraction itself, on the forms the
// files use: functions, aggregations, binary operators, a histogram's
// series, matchers and Grafana's variables.
func TestMetricNamesOfAnExpression(t *testing.T) {
	got := metricNames(t, `histogram_quantile(0.95, sum by (pod, le) (rate(mcpp_pod_tool_call_duration_seconds_bucket{pod=~"$pod"}[$__rate_interval])))
		/ on() group_left sum(rate(mcpp_pod_tool_calls_total[5m])) > 3 and mcpp_pods`)
	want := []string{"mcpp_pod_tool_call_duration_seconds_bucket", "mcpp_pod_tool_calls_total", "mcpp_pods"}
	if !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
}

// served is every series name a gateway's /metrics serves: each family's
// name, and a histogram's _bucket, _sum and _count.
func served(t *testing.T, base string) map[string]bool {
	t.Helper()
	status, body, err := harness.HTTPGet(base + "/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for name, f := range families {
		out[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	return out
}

// TestDashboardAndAlertsNameServedMetrics: a gateway with a pod that has
// done a little of everything (a member, envelopes, a refusal, an MCP
// call, a proposal) serves every metric the dashboard's queries and
// variables and the alerting rules' expressions name. The rules file is
// read strictly (an unknown key is an error, as Prometheus makes it), and
// every expression must parse as PromQL.
func TestDashboardAndAlertsNameServedMetrics(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) { c.Tokens = proposalTokens(t) })
	const pod = "monitored"
	boss := g.DialToken(t, pod, "boss-t", true, "")
	agent := g.DialToken(t, pod, "agent-t", true, "routing=directed")
	agent.Send(map[string]any{"id": "no", "kind": "test/x"})
	agent.ExpectErr("capability_violation")
	boss.Send(map[string]any{"id": "c1", "kind": "mcp/request", "to": []string{"nobody"},
		"payload": map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "x"}}})
	propose(t, agent, "p1", "echo")
	proposalEvent(t, boss, "p1", "pending")
	have := served(t, g.URL)

	check := func(where, expr string) {
		for _, name := range metricNames(t, expr) {
			if !have[name] {
				t.Errorf("%s names %s, which the gateway does not serve", where, name)
			}
		}
	}
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query struct{ Query string }
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			check("the dashboard's panel "+p.Title, tg.Expr)
			exprs++
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*\w+\)$`)
	for _, v := range dash.Templating.List {
		m := labelValues.FindStringSubmatch(v.Query.Query)
		if m == nil {
			t.Fatalf("the variable %s's query %q is not label_values(METRIC, LABEL)", v.Name, v.Query.Query)
		}
		check("the dashboard's variable "+v.Name, m[1])
	}
	if exprs < 10 {
		t.Fatalf("the dashboard has %d queries", exprs)
	}

	raw, err = os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rulesFile struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr, For    string
				Labels, Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true) // a misspelt key is an error, as Prometheus makes it
	if err := dec.Decode(&rulesFile); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	rules := 0
	for _, grp := range rulesFile.Groups {
		for _, r := range grp.Rules {
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: a rule of group %s lacks its alert name, severity or summary: %+v", alertsFile, grp.Name, r)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: alert %s: for %q: %v", alertsFile, r.Alert, r.For, err)
				}
			}
			check("the alert "+r.Alert, r.Expr)
			rules++
		}
	}
	if rules < 5 {
		t.Fatalf("%s has %d rules", alertsFile, rules)
	}
}
