package chart

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The Helm chart (deploy/helm/mcpp-gateway), checked with Helm itself:
// helm lint, then helm template for one node, two, three, with history
// off and with every optional part on, each rendering decoded strictly
// into Kubernetes' own types and checked as an operator would read it.

// optionalParts turns on every optional part of the chart.
var optionalParts = []string{
	"replicas=3",
	"auth.tokens.secretName=gw-tokens",
	"auth.jwt.secret.secretName=gw-jwt",
	"auth.jwt.publicKeys.secretName=gw-jwt-keys",
	"auth.jwt.jwksURL=https://idp.example.com/jwks.json",
	"auth.jwt.issuer=https://idp.example.com",
	"auth.jwt.audience=mcpp",
	`auth.defaultCapabilities=[{"kind": "chat"}]`,
	"tls.secretName=gw-tls",
	"serviceMonitor.enabled=true",
	"serviceMonitor.labels.release=prom",
	"maxMemory=1800MiB",
	"extraArgs={--max-pods=5000}",
	"extraEnv[0].name=MCPP_RATE",
	"extraEnv[0].value=50",
	"image.repository=registry.example.com/mcpp-gateway",
	"image.tag=v1.4.0",
}

func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, set := range [][]string{nil, {"replicas=3"}, optionalParts} {
		args := []string{"lint", "--strict", chartDir, "--namespace", "team"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := runHelm(t, args...); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(string(out), "0 chart(s) failed") {
			t.Fatalf("helm lint %v:\n%s", set, out)
		}
	}
}

// TestChartOneNode: the defaults are one gateway with its history on a
// persistent volume, and nothing of a cluster.
func TestChartOneNode(t *testing.T) {
	t.Parallel()
	m := render(t)
	checkPod(t, m, 1)
	args := m.gateway(t).Args
	for _, name := range []string{"cluster-name", "cluster-listen", "routes", "history-replicas"} {
		if v, ok := flagValue(args, name); ok {
			t.Errorf("one node renders --%s=%s", name, v)
		}
	}
	if _, ok := m.Services["mcpp-gateway-headless"]; !ok {
		t.Errorf("no headless service (the StatefulSet's serviceName)")
	}
	if m.ServiceMonitor != nil {
		t.Errorf("a ServiceMonitor without serviceMonitor.enabled")
	}
	if m.NetworkPolicy != nil {
		t.Errorf("a NetworkPolicy for one node, which has no cluster port")
	}
	if got, want := m.gateway(t).Image, "mcpp-gateway:0.1.0"; got != want {
		t.Errorf("image %q, want %q (repository and the chart's appVersion)", got, want)
	}
}

// TestChartThreeNodes: three replicas form one embedded NATS cluster
// through the headless service, with three copies of the history.
func TestChartThreeNodes(t *testing.T) {
	t.Parallel()
	m := render(t, "replicas=3")
	checkPod(t, m, 3)
	checkCluster(t, m, 3, 3)
	if aa := m.StatefulSet.Spec.Template.Spec.Affinity; aa == nil || aa.PodAntiAffinity == nil {
		t.Errorf("a cluster's nodes are not spread over machines (no podAntiAffinity)")
	}
}

// TestChartTwoNodes: the history's copies are at most the cluster's size
// (the gateway would count a route to itself as another node).
func TestChartTwoNodes(t *testing.T) {
	t.Parallel()
	m := render(t, "replicas=2")
	checkPod(t, m, 2)
	checkCluster(t, m, 2, 2)
}

// TestChartHistoryOff: history.entries=0 renders no history directory and
// no volume (the gateway refuses --history-dir with --history 0).
func TestChartHistoryOff(t *testing.T) {
	t.Parallel()
	m := render(t, "replicas=3", "history.entries=0")
	c := m.gateway(t)
	args := c.Args
	checkArgs(t, c)
	for _, name := range []string{"history-dir", "history-replicas"} {
		if v, ok := flagValue(args, name); ok {
			t.Errorf("history off renders --%s=%s", name, v)
		}
	}
	if v, _ := flagValue(args, "history"); v != "0" {
		t.Errorf("--history=%q, want 0", v)
	}
	if n := len(m.StatefulSet.Spec.VolumeClaimTemplates); n != 0 {
		t.Errorf("%d volume claims with history off", n)
	}
}

// TestChartOptionalParts: tokens, JWTs and TLS from Secrets, mounted so
// that a changed Secret reaches the gateway (which reads the files again
// when they change); probes over HTTPS; a ServiceMonitor; extra flags and
// environment.
func TestChartOptionalParts(t *testing.T) {
	t.Parallel()
	m := render(t, optionalParts...)
	checkPod(t, m, 3)
	checkCluster(t, m, 3, 3)
	c := m.gateway(t)
	if c.Image != "registry.example.com/mcpp-gateway:v1.4.0" {
		t.Errorf("image %q", c.Image)
	}
	secrets := map[string]string{ // flag: the Secret its file comes from
		"tokens": "gw-tokens", "jwt-secret-file": "gw-jwt", "jwt-public-key-file": "gw-jwt-keys",
		"tls-cert": "gw-tls", "tls-key": "gw-tls",
	}
	for name, secret := range secrets {
		path, ok := flagValue(c.Args, name)
		if !ok {
			t.Errorf("no --%s", name)
			continue
		}
		if got := secretOf(t, m, c, path); got != secret {
			t.Errorf("--%s=%s is in %q, want Secret %s", name, path, got, secret)
		}
	}
	for name, want := range map[string]string{
		"jwt-jwks-url": "https://idp.example.com/jwks.json", "jwt-issuer": "https://idp.example.com", "jwt-audience": "mcpp",
		"default-capabilities": `[{"kind": "chat"}]`, "max-memory": "1800MiB", "max-pods": "5000",
	} {
		if got, _ := flagValue(c.Args, name); got != want {
			t.Errorf("--%s=%q, want %q", name, got, want)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "MCPP_RATE" && e.Value == "50" }) {
		t.Errorf("extraEnv not in the container's env: %v", c.Env)
	}
	for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("the %s probe asks over %s with TLS on", what, p.HTTPGet.Scheme)
		}
	}

	sm := m.ServiceMonitor
	if sm == nil {
		t.Fatal("no ServiceMonitor with serviceMonitor.enabled")
	}
	if sm.Labels["release"] != "prom" {
		t.Errorf("the ServiceMonitor's labels %v lack serviceMonitor.labels", sm.Labels)
	}
	// It scrapes each node once: through the client service, whose port
	// it names, not also through the headless one.
	var scraped []string
	for name, s := range m.Services {
		if selects(sm.Spec.Selector.MatchLabels, s.Labels) {
			scraped = append(scraped, name)
		}
	}
	if len(scraped) != 1 || scraped[0] != "mcpp-gateway" {
		t.Fatalf("the ServiceMonitor selects the services %v, want [mcpp-gateway]", scraped)
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != servicePort(t, m.Services["mcpp-gateway"], "http").Name || ep.Path != "/metrics" || ep.Scheme == nil || ep.Scheme.String() != "https" {
		t.Errorf("ServiceMonitor endpoint port %q path %q scheme %v, want http /metrics https", ep.Port, ep.Path, ep.Scheme)
	}
}

// TestChartRefusals: values that cannot work are refused by name.
func TestChartRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"terminationGracePeriodSeconds=30"}, "terminationGracePeriodSeconds (30) must be at least shutdownTimeoutSeconds (25) + 10"},
		{[]string{"shutdownTimeoutSeconds=60"}, "terminationGracePeriodSeconds (45) must be at least shutdownTimeoutSeconds (60) + 10"},
		{[]string{"replicas=0"}, "replicas must be at least 1"},
		{[]string{"replicas=2", "history.replicas=3"}, "history.replicas (3) cannot exceed replicas (2)"},
		{[]string{"replicas=3", "history.entries=0", "history.replicas=3"}, "history.replicas needs history on"},
		{[]string{"replicas=7", "history.replicas=6"}, "history.replicas must be 0"},
	} {
		out, err := runHelm(t, templateArgs(tc.set...)...)
		if err == nil {
			t.Errorf("helm template %v rendered:\n%s", tc.set, out)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: %v\nwant an error saying %q", tc.set, err, tc.want)
		}
	}
}

// checkPod checks what every rendering must have: the gateway's port and
// probes, a grace period longer than the drain, a non-root user on a
// read-only root filesystem writing only its history's volume, the
// services and the disruption budget selecting the pods.
func checkPod(t *testing.T, m manifests, replicas int32) {
	t.Helper()
	sts := m.StatefulSet
	spec := sts.Spec.Template.Spec
	c := m.gateway(t)
	checkArgs(t, c)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != replicas {
		t.Errorf("replicas %v, want %d", sts.Spec.Replicas, replicas)
	}
	podLabels := sts.Spec.Template.Labels
	if !selects(sts.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods %v", sts.Spec.Selector.MatchLabels, podLabels)
	}

	// The gateway listens on all of the pod's addresses, on the port the
	// container declares as http, which the services and probes name.
	http := containerPort(t, c, "http")
	if v, _ := flagValue(c.Args, "listen"); v != fmt.Sprintf("0.0.0.0:%d", http.ContainerPort) {
		t.Errorf("--listen=%s, want 0.0.0.0:%d (the container's http port)", v, http.ContainerPort)
	}
	for what, p := range map[string]struct {
		probe *corev1.Probe
		path  string
	}{"liveness": {c.LivenessProbe, "/livez"}, "readiness": {c.ReadinessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", what)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port != intstr.FromString("http") {
			t.Errorf("%s probe: %s on port %v, want %s on http", what, g.Path, g.Port.String(), p.path)
		}
	}

	// The grace period covers the drain and what follows it.
	drain, err := time.ParseDuration(mustFlag(t, c.Args, "shutdown-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	if grace := spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second < drain+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v is not 10 s longer than the drain (--shutdown-timeout=%v)", grace, drain)
	}

	// Not root, nothing to escalate to, a read-only root filesystem.
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != harness.ImageUser || psc.FSGroup == nil || *psc.FSGroup != harness.ImageUser {
		t.Errorf("pod securityContext %+v, want runAsNonRoot, runAsUser and fsGroup %d", psc, harness.ImageUser)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("container securityContext %+v, want a read-only root filesystem, no privilege escalation, every capability dropped", sc)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("enableServiceLinks is not false: the namespace's services would set MCPP_ variables")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("the pod mounts a service account token: the gateway never calls the Kubernetes API")
	}

	// The only writable mount is the history's directory.
	dir, history := flagValue(c.Args, "history-dir")
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dir {
			if vm.ReadOnly {
				t.Errorf("the history's directory %s is mounted read-only", dir)
			}
			continue
		}
		if !vm.ReadOnly {
			t.Errorf("%s is mounted writable", vm.MountPath)
		}
	}
	if history {
		vm := mountOf(c, dir)
		if vm == nil {
			t.Fatalf("--history-dir=%s is no mount: the read-only root filesystem would refuse the history", dir)
		}
		if !slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name }) {
			t.Errorf("the history's volume %q is not one of the volumeClaimTemplates", vm.Name)
		}
	}

	// The client service reaches the pods' http port.
	svc := m.Services["mcpp-gateway"]
	if svc == nil {
		t.Fatalf("no service mcpp-gateway; rendered %v", m.Kinds)
	}
	if !selects(svc.Spec.Selector, podLabels) {
		t.Errorf("the service's selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	if p := servicePort(t, svc, "http"); p.TargetPort != intstr.FromString("http") {
		t.Errorf("the service's http port targets %v", p.TargetPort.String())
	}

	// A voluntary disruption takes one node at a time.
	if m.PDB == nil || m.PDB.Spec.MaxUnavailable == nil || m.PDB.Spec.MaxUnavailable.IntValue() != 1 || !selects(m.PDB.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1 selecting the pods", m.PDB)
	}
}

// checkCluster checks the flags of an embedded cluster of n nodes: the
// routes name every pod by the DNS name the headless service gives it,
// on the cluster port the container declares.
func checkCluster(t *testing.T, m manifests, n, historyReplicas int) {
	t.Helper()
	sts := m.StatefulSet
	c := m.gateway(t)
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: a node waiting for the one before it to be ready would wait for a cluster that needs it", sts.Spec.PodManagementPolicy)
	}
	headless := m.Services[sts.Spec.ServiceName]
	if headless == nil {
		t.Fatalf("the StatefulSet's serviceName %q is not rendered", sts.Spec.ServiceName)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless service publishing nodes before they are ready",
			headless.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if !selects(headless.Spec.Selector, sts.Spec.Template.Labels) {
		t.Errorf("the headless service does not select the pods")
	}
	cport := containerPort(t, c, "cluster")
	if p := servicePort(t, headless, "cluster"); p.Port != cport.ContainerPort || p.TargetPort != intstr.FromString("cluster") {
		t.Errorf("the headless service's cluster port %d → %v, want %d → cluster", p.Port, p.TargetPort.String(), cport.ContainerPort)
	}
	if v := mustFlag(t, c.Args, "cluster-listen"); v != fmt.Sprintf("0.0.0.0:%d", cport.ContainerPort) {
		t.Errorf("--cluster-listen=%s, want 0.0.0.0:%d", v, cport.ContainerPort)
	}
	if v := mustFlag(t, c.Args, "cluster-name"); v != sts.Name {
		t.Errorf("--cluster-name=%s, want %s", v, sts.Name)
	}
	var want []string
	for i := 0; i < n; i++ {
		want = append(want, fmt.Sprintf("nats-route://%s:%d", podDNSName(sts, i), cport.ContainerPort))
	}
	routes := strings.Split(mustFlag(t, c.Args, "routes"), ",")
	if !slices.Equal(routes, want) {
		t.Errorf("--routes=%v\nwant %v (each pod by its name under the headless service)", routes, want)
	}
	for _, r := range routes {
		if u, err := url.Parse(r); err != nil || u.Scheme != "nats-route" {
			t.Errorf("route %q is not a nats-route:// URL", r)
		}
	}
	if v := mustFlag(t, c.Args, "history-replicas"); v != strconv.Itoa(historyReplicas) {
		t.Errorf("--history-replicas=%s, want %d", v, historyReplicas)
	}
	checkNetworkPolicy(t, m)
}

// checkNetworkPolicy checks that the cluster port, whose routes carry
// every pod's envelopes without credentials, admits the gateway's own
// pods alone, and that the HTTP port admits anyone.
func checkNetworkPolicy(t *testing.T, m manifests) {
	t.Helper()
	np := m.NetworkPolicy
	if np == nil {
		t.Fatalf("a cluster without a NetworkPolicy: any pod could join its NATS cluster on the route port")
	}
	podLabels := m.StatefulSet.Spec.Template.Labels
	if !selects(np.Spec.PodSelector.MatchLabels, podLabels) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Fatalf("the NetworkPolicy selects %v for %v, want the gateway's pods, ingress", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes)
	}
	from := map[string][]networkingv1.NetworkPolicyPeer{} // port: who may reach it ("everyone" is an empty list)
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			t.Fatalf("an ingress rule for every port: %+v", rule)
		}
		for _, p := range rule.Ports {
			if p.Port == nil {
				t.Fatalf("an ingress rule for every port: %+v", rule)
			}
			from[p.Port.String()] = append(from[p.Port.String()], rule.From...)
		}
	}
	if peers, ok := from["http"]; !ok || len(peers) != 0 {
		t.Errorf("the http port admits %v, want anyone", peers)
	}
	peers, ok := from["cluster"]
	if !ok || len(peers) == 0 {
		t.Fatalf("the cluster port admits anyone (%v)", peers)
	}
	for _, p := range peers {
		if p.IPBlock != nil || p.NamespaceSelector != nil || p.PodSelector == nil || !selects(p.PodSelector.MatchLabels, podLabels) ||
			len(p.PodSelector.MatchLabels) != len(m.StatefulSet.Spec.Selector.MatchLabels) {
			t.Errorf("the cluster port admits %+v, want the gateway's pods alone", p)
		}
	}
	if len(from) != 2 {
		t.Errorf("the NetworkPolicy names the ports %v, want http and cluster", from)
	}
}

// podDNSName is the name Kubernetes gives pod i of a StatefulSet under its
// headless service.
func podDNSName(sts *appsv1.StatefulSet, i int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", sts.Name, i, sts.Spec.ServiceName, sts.Namespace)
}

// checkArgs parses the container's arguments as mcpp-gateway does, its
// environment (the image's, then the container's) as MCPP_ variables
// under them, and validates the whole as the gateway does at start, so
// that a rendering the gateway would refuse fails here.
func checkArgs(t *testing.T, c corev1.Container) {
	t.Helper()
	cfg := gateway.DefaultConfig()
	fs := flag.NewFlagSet("mcpp-gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	fs.String("log-level", "info", "") // cmd/mcpp-gateway's own
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("mcpp-gateway would refuse the rendered arguments %q: %v", c.Args, err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("rendered arguments left over: %q", fs.Args())
	}
	env := containerEnv(c)
	if err := gateway.ApplyEnv(fs, func(k string) (string, bool) {
		i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		if i < 0 {
			return "", false
		}
		return strings.TrimPrefix(env[i], k+"="), true
	}); err != nil {
		t.Fatalf("mcpp-gateway would refuse the environment %q: %v", env, err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("mcpp-gateway would refuse the rendered arguments %q with the environment %q: %v", c.Args, env, err)
	}
}

// containerEnv is the process's environment in the container: the
// image's, then the container's own (which wins), last first.
func containerEnv(c corev1.Container) []string {
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	for _, kv := range harness.ImageEnv {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name }) {
			env = append(env, kv)
		}
	}
	return env
}

// flagValue is the value of --name=VALUE in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func mustFlag(t *testing.T, args []string, name string) string {
	t.Helper()
	v, ok := flagValue(args, name)
	if !ok {
		t.Fatalf("no --%s in %q", name, args)
	}
	return v
}

// selects reports whether a selector's labels are all among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func containerPort(t *testing.T, c corev1.Container, name string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("the container has no port %q: %v", name, c.Ports)
	return corev1.ContainerPort{}
}

func servicePort(t *testing.T, s *corev1.Service, name string) corev1.ServicePort {
	t.Helper()
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("service %s has no port %q: %v", s.Name, name, s.Spec.Ports)
	return corev1.ServicePort{}
}

// mountOf is the volume mount that holds path.
func mountOf(c corev1.Container, path string) *corev1.VolumeMount {
	for i, vm := range c.VolumeMounts {
		if path == vm.MountPath || strings.HasPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// secretOf is the Secret whose volume holds path, mounted whole: a
// subPath mount would never see the Secret change, and the gateway's
// reload of a changed file would never happen.
func secretOf(t *testing.T, m manifests, c corev1.Container, path string) string {
	t.Helper()
	vm := mountOf(c, path)
	if vm == nil {
		t.Errorf("%s is in no mounted volume", path)
		return ""
	}
	if vm.SubPath != "" || vm.SubPathExpr != "" {
		t.Errorf("%s is mounted with a subPath: changes of its Secret never reach it", path)
	}
	for _, v := range m.StatefulSet.Spec.Template.Spec.Volumes {
		if v.Name == vm.Name {
			if v.Secret == nil {
				t.Errorf("%s is in volume %s, not a Secret", path, v.Name)
				return ""
			}
			return v.Secret.SecretName
		}
	}
	t.Errorf("volume %s of %s is not in the pod", vm.Name, path)
	return ""
}
