package clients_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcpp/gateway/internal/debpkg"
)

// What TestTypeScriptClient, TestPythonClient and TestConformance need of
// the machine, made ready once per test binary: the first test that needs
// it pays, the others find it done.
var (
	typeScriptOnce sync.Once
	typeScriptErr  error
	buildOnce      sync.Once
	buildErr       error
	pythonOnce     sync.Once
	pythonErr      error
)

// installTypeScript checks for Node and npm, and installs the TypeScript
// client's npm packages when node_modules is missing, exactly as
// package-lock.json pins them (npm ci).
func installTypeScript(t *testing.T) {
	t.Helper()
	typeScriptOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				typeScriptErr = fmt.Errorf("the TypeScript client needs Node 20 or later and npm: %w", err)
				return
			}
		}
		if _, err := os.Stat(filepath.Join("typescript", "node_modules")); os.IsNotExist(err) {
			typeScriptErr = command(5*time.Minute, "typescript", "npm", "ci", "--no-audit", "--no-fund")
		}
	})
	if typeScriptErr != nil {
		t.Fatal(typeScriptErr)
	}
}

// buildTypeScript installs the TypeScript client's packages and builds it
// (dist/, which the conformance driver imports), once per test binary.
// npm test builds again; tsc's incremental build makes that second one
// cheap.
func buildTypeScript(t *testing.T) {
	t.Helper()
	installTypeScript(t)
	buildOnce.Do(func() {
		buildErr = command(3*time.Minute, "typescript", "npm", "run", "build")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// installPython makes sure Debian's /usr/bin/python3 has what the Python
// client and its tests import: python3-websockets (10.4 on Debian 12: the
// legacy API the package must keep working with) and python3-pytest,
// installed with apt-get when missing. /usr/bin/python3, not whatever
// python3 comes first on PATH.
func installPython(t *testing.T) {
	t.Helper()
	pythonOnce.Do(func() {
		have := func() bool {
			return exec.Command("/usr/bin/python3", "-c", "import websockets, pytest").Run() == nil
		}
		pythonErr = debpkg.Ensure(context.Background(), have, "python3-websockets", "python3-pytest")
	})
	if pythonErr != nil {
		t.Fatal(pythonErr)
	}
}

// command runs name with args in dir (relative to clients/) and returns
// an error holding its output when it fails.
func command(timeout time.Duration, dir, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v in clients/%s failed: %w\n%s", name, args, dir, err, out)
	}
	return nil
}
