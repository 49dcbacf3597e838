package integration

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestBenchCommand runs `mcpp bench` as BENCHMARKS.md does, on a tiny scale:
// it starts the gateway and the bare relay itself, and reports deliveries,
// latency, CPU per delivery and the gateway/baseline ratio.
func TestBenchCommand(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp") // builds mcpp-gateway beside it
	out, err := exec.Command(bin, "bench", "--subscribers", "4", "--duration", "400ms", "--warmup", "200ms",
		"--rounds", "1", "--baseline", "--filters", "--latency-at", "0.5").CombinedOutput()
	if err != nil {
		t.Fatalf("mcpp bench: %v\n%s", err, out)
	}
	for _, re := range []string{
		`gateway +round 1: +(\d+) deliveries/s`,
		`baseline +round 1: +(\d+) deliveries/s`,
		`server CPU [0-9.]+ µs/delivery`,
		`gateway/baseline ([0-9.]+)`,
		`latency at 50% of capacity: gateway p50 \S+ p99 \S+`,
	} {
		m := regexp.MustCompile(re).FindSubmatch(out)
		if m == nil {
			t.Fatalf("bench output lacks %q:\n%s", re, out)
		}
		if len(m) > 1 {
			if v, _ := strconv.ParseFloat(string(m[1]), 64); v <= 0 {
				t.Fatalf("bench reported %s for %q:\n%s", m[1], re, out)
			}
		}
	}
	out, err = exec.Command(bin, "bench", "--idle", "50", "--baseline").CombinedOutput()
	if err != nil {
		t.Fatalf("mcpp bench --idle: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`gateway +50 idle connections: [0-9.-]+ KiB RSS per connection`).Match(out) {
		t.Fatalf("idle output:\n%s", out)
	}
	if code := exec.Command(bin, "bench", "--size", "10").Run(); code == nil {
		t.Fatal("bench --size 10 succeeded; want a usage error")
	} else if e, ok := code.(*exec.ExitError); !ok || e.ExitCode() != 2 {
		t.Fatalf("bench --size 10: %v, want exit 2", code)
	}
}
