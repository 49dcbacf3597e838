package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// chartDir is the chart the tests render.
const chartDir = "../../deploy/helm/mcpp-gateway"

// scheme knows the kinds the chart may render: Kubernetes' own types and
// the Prometheus Operator's ServiceMonitor. A kind it does not know is
// an error, as the API server's would be.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme, policyv1.AddToScheme, monitoringv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML or JSON into the scheme's types, refusing unknown
// and duplicate fields (a misspelt or misplaced field in a template, which
// the API server would drop or refuse).
var strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()

// manifests are the objects one helm template rendered.
type manifests struct {
	StatefulSet    *appsv1.StatefulSet
	Services       map[string]*corev1.Service // by name
	PDB            *policyv1.PodDisruptionBudget
	NetworkPolicy  *networkingv1.NetworkPolicy
	ServiceMonitor *monitoringv1.ServiceMonitor
	Kinds          []string
}

// render runs helm template on the chart as release mcpp-gateway in
// namespace team, with --set values, and decodes every document
// strictly.
func render(t *testing.T, set ...string) manifests {
	t.Helper()
	out, err := runHelm(t, templateArgs(set...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifests(out)
	if err != nil {
		t.Fatalf("%v\nin:\n%s", err, out)
	}
	return m
}

func templateArgs(set ...string) []string {
	args := []string{"template", "mcpp-gateway", chartDir, "--namespace", "team"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

func decodeManifests(out []byte) (manifests, error) {
	m := manifests{Services: map[string]*corev1.Service{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return m, fmt.Errorf("decoding a rendered document strictly: %w\n%s", err, doc)
		}
		m.Kinds = append(m.Kinds, gvk.Kind)
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			if m.StatefulSet != nil {
				return m, errors.New("two StatefulSets")
			}
			m.StatefulSet = o
		case *corev1.Service:
			m.Services[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			m.PDB = o
		case *networkingv1.NetworkPolicy:
			m.NetworkPolicy = o
		case *monitoringv1.ServiceMonitor:
			m.ServiceMonitor = o
		default:
			return m, fmt.Errorf("a %s the tests do not check", gvk)
		}
	}
	if m.StatefulSet == nil {
		return m, errors.New("no StatefulSet rendered")
	}
	return m, nil
}

// stripComments drops the lines that are YAML comments (helm template
// heads each document with "# Source: …").
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// gateway is the StatefulSet's gateway container.
func (m manifests) gateway(t *testing.T) corev1.Container {
	t.Helper()
	cs := m.StatefulSet.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "gateway" {
		t.Fatalf("containers %v, want one named gateway", cs)
	}
	return cs[0]
}
