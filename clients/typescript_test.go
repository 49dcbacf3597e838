package clients_test

import (
	"testing"
	"time"
)

// TestTypeScriptClient runs the TypeScript client's own tests (npm test
// in clients/typescript: it builds the package and its tests with tsc,
// then runs them with Node's test runner against the gateway TestMain
// built). The npm packages are installed first when node_modules is
// missing (installTypeScript).
func TestTypeScriptClient(t *testing.T) {
	installTypeScript(t)
	// About 20 s on an idle machine; the bound leaves room for one that
	// runs the other packages' tests at the same time.
	runner(t, 4*time.Minute, "typescript", "npm", "test")
}
