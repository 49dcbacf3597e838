package chart

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// helmModule pins Helm as a tool of a module of its own (go mod init, go
// get -tool helm.sh/helm/v4/cmd/helm@v4.3.2), as testdata/mcp-servers'
// package-lock.json pins the npm packages the bridge tests run: its
// go.sum is checked in, so every machine builds the same Helm.
const helmModule = "testdata/helm"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary is Helm's command, built from helmModule once and kept in
// its bin/ (ignored by git) under a name that changes with the module's
// go.sum: later runs on the machine reuse it. The first build compiles
// Helm and the Kubernetes client: about 580 s of CPU, 5 minutes of two
// idle cores (Go's build cache, shared with other checkouts, makes a
// rebuild in a fresh checkout a link).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		sum, err := os.ReadFile(filepath.Join(helmModule, "go.sum"))
		if err != nil {
			helmErr = err
			return
		}
		h := sha256.Sum256(sum)
		path, err := filepath.Abs(filepath.Join(helmModule, "bin", "helm-"+hex.EncodeToString(h[:6])))
		if err != nil {
			helmErr = err
			return
		}
		if _, err := os.Stat(path); err == nil {
			helmPath = path
			return
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		// Written beside its final name, then renamed: a build cut short
		// leaves no binary that a later run would take for a whole one,
		// and the next build removes what it left.
		removeStale(filepath.Dir(path))
		tmp := path + fmt.Sprintf(".%d.tmp", os.Getpid())
		cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-ldflags=-s -w", "-o", tmp, "helm.sh/helm/v4/cmd/helm")
		cmd.Dir = helmModule
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			helmErr = fmt.Errorf("go build helm in integration/chart/%s: %w\n%s", helmModule, err, out)
			return
		}
		if err := os.Rename(tmp, path); err != nil {
			helmErr = err
			return
		}
		t.Logf("built Helm (%s) in %v", path, time.Since(start).Round(time.Second))
		helmPath = path
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// removeStale removes what builds cut short left in dir: the temporary
// files of builds that began more than an hour ago (a build's limit is
// 15 minutes).
func removeStale(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, tmp := range tmps {
		if st, err := os.Stat(tmp); err == nil && time.Since(st.ModTime()) > time.Hour {
			_ = os.Remove(tmp)
		}
	}
}

// runHelm runs Helm with args and returns what it printed on its standard
// output, or its error with what it said.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	// Built (or found) first: the first build takes minutes of its own
	// bound, and Helm's 2 minutes start after it. Before, they started
	// with it, and on a fresh machine (CI's, whose build took 4.5 min)
	// every Helm command was past its deadline when it began.
	helm := helmBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	// Helm's own state (repositories, cache) in the test's directory,
	// never the user's.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %v: %w\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}
