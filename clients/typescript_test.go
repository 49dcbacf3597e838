package clients_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTypeScriptClient runs the TypeScript client's own tests (npm test
// in clients/typescript: it builds the package and its tests with tsc,
// then runs them with Node's test runner against the gateway TestMain
// built). The npm packages are installed first when node_modules is
// missing, exactly as package-lock.json pins them (npm ci).
func TestTypeScriptClient(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the TypeScript client's tests need Node 20 or later and npm: %v", err)
		}
	}
	dir := "typescript"
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); os.IsNotExist(err) {
		runner(t, 5*time.Minute, dir, "npm", "ci", "--no-audit", "--no-fund")
	}
	// About 20 s on an idle machine; the bound leaves room for one that
	// runs the other packages' tests at the same time.
	runner(t, 4*time.Minute, dir, "npm", "test")
}
