package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// JaegerVersion is the Jaeger the tracing tests export to: its v2
// (an OpenTelemetry collector with Jaeger's storage and query API), as
// a Go module version.
const JaegerVersion = "v1.75.0"

var (
	jaegerOnce sync.Once
	jaegerBin  string
	jaegerErr  error
)

// JaegerBinary is the path of the Jaeger binary that scripts/jaeger.sh
// keeps outside the checkout ($MCPP_JAEGER_BIN, else
// $XDG_CACHE_HOME/mcpp/jaeger-VERSION), as Go keeps its caches: a fresh
// clone finds it. The script builds it when it is not there (long on an
// empty Go cache: .ci/run runs it before the tests).
func JaegerBinary(t testing.TB) string {
	t.Helper()
	jaegerOnce.Do(func() {
		start := time.Now()
		cmd := exec.Command("bash", filepath.Join("..", "scripts", "jaeger.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			jaegerErr = fmt.Errorf("scripts/jaeger.sh (Jaeger for the tracing tests): %v\n%s", err, stderr.String())
			return
		}
		jaegerBin = strings.TrimSpace(string(out))
		if d := time.Since(start); d > 10*time.Second {
			fmt.Fprintf(os.Stderr, "Jaeger %s built in %v: %s\n", JaegerVersion, d.Round(time.Second), jaegerBin)
		}
	})
	if jaegerErr != nil {
		t.Fatal(jaegerErr)
	}
	return jaegerBin
}

// JaegerProc is a Jaeger started for a test: OTLP in (gRPC and HTTP),
// its query API out, traces kept in memory.
type JaegerProc struct {
	// OTLPHTTP and OTLPGRPC are the OTLP receivers' endpoints
	// (http://127.0.0.1:PORT), Query the query API's base URL.
	OTLPHTTP, OTLPGRPC, Query string
	Stderr                    *SyncBuffer
}

// jaegerConfig is Jaeger v2's configuration for a test: the OTLP
// receiver, memory storage, the query API, on loopback ports.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// StartJaeger runs Jaeger until the test ends and waits until its query
// API answers.
func StartJaeger(t *testing.T) *JaegerProc {
	t.Helper()
	bin := JaegerBinary(t)
	for try := 1; ; try++ {
		j, taken := tryJaeger(t, bin)
		if j != nil {
			return j
		}
		if !taken || try == 3 {
			t.Fatal("Jaeger did not start")
		}
	}
}

// tryJaeger starts Jaeger on ports that were free a moment ago; taken
// says one of them was taken meanwhile.
func tryJaeger(t *testing.T, bin string) (j *JaegerProc, taken bool) {
	t.Helper()
	query, grpcQuery, otlpGRPC, otlpHTTP := FreePort(t), FreePort(t), FreePort(t), FreePort(t)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, query, grpcQuery, otlpGRPC, otlpHTTP), 0o600); err != nil {
		t.Fatal(err)
	}
	j = &JaegerProc{OTLPHTTP: fmt.Sprintf("http://127.0.0.1:%d", otlpHTTP), OTLPGRPC: fmt.Sprintf("http://127.0.0.1:%d", otlpGRPC),
		Query: fmt.Sprintf("http://127.0.0.1:%d", query), Stderr: &SyncBuffer{}}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = j.Stderr, j.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("Jaeger's log:\n%s", j.Stderr)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			if bytes.Contains([]byte(j.Stderr.String()), []byte("address already in use")) {
				return nil, true
			}
			t.Fatalf("Jaeger exited:\n%s", j.Stderr)
		default:
		}
		if r, err := http.Get(j.Query + "/api/services"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return j, false
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Jaeger's query API did not answer within 60s:\n%s", j.Stderr)
	return nil, false
}

// JaegerSpan is a span as Jaeger's query API gives it.
type JaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs since 1970
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
	// Service is the name of the service of its process (filled by
	// Trace).
	Service string `json:"-"`
}

// Tag is the span's tag key, as text ("" when absent).
func (s *JaegerSpan) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Parent is the span id of the span's parent ("" for a root).
func (s *JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace is the trace id's spans as Jaeger holds them now (none when it
// holds none).
func (j *JaegerProc) Trace(t *testing.T, traceID string) []*JaegerSpan {
	t.Helper()
	r, err := http.Get(j.Query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	if r.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []struct {
			Spans     []*JaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		t.Fatalf("Jaeger's /api/traces/%s: %v", traceID, err)
	}
	var out []*JaegerSpan
	for _, d := range body.Data {
		for _, s := range d.Spans {
			s.Service = d.Processes[s.ProcessID].ServiceName
			out = append(out, s)
		}
	}
	return out
}

// TraceJSON is the trace as Jaeger's query API gives it, raw.
func (j *JaegerProc) TraceJSON(t *testing.T, traceID string) []byte {
	t.Helper()
	r, err := http.Get(j.Query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(r.Body)
	return b.Bytes()
}
