package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestGatewayVersion: mcpp-gateway --version prints its version and exits 0.
func TestGatewayVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(harness.BuildCommand(t, "mcpp-gateway"), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mcpp-gateway ") || !strings.Contains(string(out), "go1.") {
		t.Fatalf("mcpp-gateway --version: %v\n%s", err, out)
	}
}
