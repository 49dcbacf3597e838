// The TypeScript and Python clients' own tests, run by `go test ./...`
// (the README's one test command): each language's test runner is started
// on its package, against a real gateway built from this repository, after
// what it needs is installed when missing (npm packages from the npm
// registry, Debian's python3-websockets and python3-pytest).
//
// Each runner also works on its own (npm test in clients/typescript,
// /usr/bin/python3 -m pytest in clients/python): it builds the gateway
// with `go build` unless MCPP_GATEWAY_BIN names a binary, which this file
// sets so that the gateway is built once.
package clients_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// gatewayBin is the mcpp-gateway binary TestMain built (or
// MCPP_GATEWAY_BIN).
var gatewayBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	gatewayBin = os.Getenv("MCPP_GATEWAY_BIN")
	if gatewayBin == "" {
		dir, err := os.MkdirTemp("", "mcpp-clients-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		gatewayBin = filepath.Join(dir, "mcpp-gateway")
		cmd := exec.Command("go", "build", "-o", gatewayBin, "../cmd/mcpp-gateway")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building mcpp-gateway: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

// runner runs a language's test command in dir (relative to clients/),
// with the gateway binary in MCPP_GATEWAY_BIN, and fails the test with its
// output when it fails. Its output is logged either way (go test -v).
func runner(t *testing.T, timeout time.Duration, dir, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCPP_GATEWAY_BIN="+gatewayBin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("%s %v in %s:\n%s", name, args, dir, out.String())
	if err != nil {
		t.Fatalf("%s %v in clients/%s failed: %v (output above)", name, args, dir, err)
	}
}
