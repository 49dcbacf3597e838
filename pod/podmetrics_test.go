package pod

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// valueOf is a counter's or a gauge's value.
func valueOf(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// podsOf are the pod labels a collector serves now.
func podsOf(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	var out []string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Label {
			if l.GetName() == "pod" {
				out = append(out, l.GetValue())
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestPodLabels: pods are named while there is a slot, the rest are
// "other" (a pod named "other" too); two pods of one name (one closing,
// one opening) share the name, whose series go when the last closes; a
// closing pod takes its share out of the gauges, "other"'s included.
func TestPodLabels(t *testing.T) {
	m := newPodMetrics()
	m.SetMaxPods(2)
	a, other, b := m.open("a"), m.open("other"), m.open("b")
	c := m.open("c")
	if a.label != "a" || b.label != "b" || other.label != OtherPods || c.label != OtherPods {
		t.Fatalf("labels %s %s %s %s", a.label, b.label, other.label, c.label)
	}
	a2 := m.open("a") // a opens again while the first a closes
	if a2.label != "a" || m.Named() != 2 {
		t.Fatalf("the second a: %s, named %d", a2.label, m.Named())
	}
	a.envIn.Inc()
	a.setMembers(3)
	c.setMembers(2)
	c.addPending(4)
	a.close()
	if got := valueOf(t, a2.envIn); got != 1 || !slices.Equal(podsOf(t, m.envIn), []string{"a", "b", OtherPods}) {
		t.Fatalf("a's series went while another a is open: %v, %v", got, podsOf(t, m.envIn))
	}
	a2.close()
	if got := podsOf(t, m.envIn); !slices.Equal(got, []string{"b", OtherPods}) || m.Named() != 1 {
		t.Fatalf("after both a closed: series of %v, %d named", got, m.Named())
	}
	if got := podsOf(t, m.members); !slices.Equal(got, []string{"b", OtherPods}) {
		t.Fatalf("members of %v", got)
	}
	if d := m.open("d"); d.label != "d" {
		t.Fatalf("the freed slot went to %s", d.label)
	}
	if got := valueOf(t, c.members); got != 2 {
		t.Fatalf("other's members: %v", got)
	}
	c.close()
	if got := valueOf(t, c.members); got != 0 {
		t.Fatalf("other's members after c closed: %v", got)
	}
	if got := valueOf(t, c.pending); got != 0 {
		t.Fatalf("other's pending proposals after c closed: %v", got)
	}
}
