package clients_test

import (
	"testing"
	"time"
)

// TestPythonClient runs the Python client's own tests (pytest, in
// clients/python) against the gateway this repository builds, with
// Debian's python3-websockets and python3-pytest (installPython).
func TestPythonClient(t *testing.T) {
	installPython(t)
	runner(t, 8*time.Minute, "python", "/usr/bin/python3", "-m", "pytest", "-q")
}
