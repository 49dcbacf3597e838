package clients_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/mcpp/gateway/internal/debpkg"
)

// TestPythonClient runs the Python client's own tests (pytest, in
// clients/python) against the gateway this repository builds. They use
// Debian's python3-websockets (10.4 on Debian 12: the legacy API the
// package must keep working with) and python3-pytest, installed here when
// missing, and Debian's /usr/bin/python3, not whatever python3 comes first
// on PATH.
func TestPythonClient(t *testing.T) {
	have := func() bool {
		return exec.Command("/usr/bin/python3", "-c", "import websockets, pytest").Run() == nil
	}
	if err := debpkg.Ensure(context.Background(), have, "python3-websockets", "python3-pytest"); err != nil {
		t.Fatal(err)
	}
	runner(t, 8*time.Minute, "python", "/usr/bin/python3", "-m", "pytest", "-q")
}
