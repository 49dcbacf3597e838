package integration

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// mcpp against a TLS gateway whose certificate a private CA signed:
// --ca-file (or MCPP_CA_FILE) for every command, Go's own SSL_CERT_FILE,
// and the refusal without either.

// runCLIEnv is runCLI with variables added to the CLI's environment.
func runCLIEnv(t *testing.T, bin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cliEnv(), env...)
	var stdout, stderr harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mcpp %v did not end within 30s; stderr:\n%s", args, stderr.String())
	}
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("mcpp %v: %v", args, err)
	}
	return r
}

// TestCLIOverTLS: tail joins over wss:// and send, contexts and history
// POST over https:// with --ca-file; MCPP_CA_FILE and SSL_CERT_FILE do
// the same without the flag; without any, each command fails with exit
// status 1 and says how to trust the CA.
func TestCLIOverTLS(t *testing.T) {
	t.Parallel()
	bin := harness.BuildCommand(t, "mcpp")
	ca := gatewaytest.NewCA(t)
	g, _, _ := tlsGateway(t, ca, nil)
	caFile := ca.File(t)
	const pod = "tls-cli"

	tail := startCLI(t, bin, "tail", "--gateway", g.URL, "--pod", pod, "--participant", "watcher", "--ca-file", caFile, "--count", "3")
	tail.waitWelcome()

	send := func(env []string, text string, extra ...string) cliResult {
		t.Helper()
		args := append([]string{"send", "--gateway", g.WS, "--pod", pod, "--participant", "alice", "--kind", "chat",
			"--payload", `{"text":"` + text + `"}`}, extra...)
		return runCLIEnv(t, bin, env, args...)
	}
	if r := send(nil, "one", "--ca-file", caFile); r.code != 0 {
		t.Fatalf("send --ca-file: exit %d\n%s", r.code, r.stderr)
	}
	if r := send([]string{"MCPP_CA_FILE=" + caFile}, "two"); r.code != 0 {
		t.Fatalf("send with MCPP_CA_FILE: exit %d\n%s", r.code, r.stderr)
	}
	// Go reads the roots from SSL_CERT_FILE, in place of the system's.
	if r := send([]string{"SSL_CERT_FILE=" + caFile}, "three"); r.code != 0 {
		t.Fatalf("send with SSL_CERT_FILE: exit %d\n%s", r.code, r.stderr)
	}
	if code := tail.wait(); code != 0 {
		t.Fatalf("tail --count 3 over wss:// exited %d\n%s", code, tail.stderr.String())
	}
	var texts []string
	for _, m := range decodeCLILines(t, tail.lines()) {
		texts = append(texts, cliText(m))
	}
	if strings.Join(texts, ",") != "one,two,three" {
		t.Fatalf("tail over wss:// printed %v, want one,two,three", texts)
	}

	for _, args := range [][]string{
		{"contexts", "--gateway", g.URL, "--pod", pod, "--ca-file", caFile},
		{"history", "--gateway", g.URL, "--pod", pod, "--ca-file", caFile},
	} {
		if r := runCLIEnv(t, bin, nil, args...); r.code != 0 {
			t.Errorf("mcpp %v: exit %d\n%s", args, r.code, r.stderr)
		}
	}

	// Without the CA: refused by the client, with the way out named.
	for _, args := range [][]string{
		{"send", "--gateway", g.URL, "--pod", pod, "--participant", "alice", "--kind", "chat"},
		{"tail", "--gateway", g.URL, "--pod", pod, "--count", "1"},
		{"contexts", "--gateway", g.URL, "--pod", pod},
		{"history", "--gateway", g.URL, "--pod", pod},
	} {
		r := runCLIEnv(t, bin, nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "unknown authority") || !strings.Contains(r.stderr, "--ca-file") {
			t.Errorf("mcpp %v without the CA: exit %d, stderr %q; want 1, unknown authority, and --ca-file named", args, r.code, r.stderr)
		}
	}
}

// TestCLICAFileUsage: a --ca-file that cannot be read, or holds no PEM
// certificate, is a wrong command line (exit 2) that names the flag,
// before anything is dialed.
func TestCLICAFileUsage(t *testing.T) {
	t.Parallel()
	bin := harness.BuildCommand(t, "mcpp")
	notPEM := harness.WriteFile(t, "ca.pem", "not a certificate\n")
	for _, file := range []string{notPEM, notPEM + ".gone"} {
		r := runCLIEnv(t, bin, nil, "send", "--gateway", "https://127.0.0.1:1", "--pod", "lab", "--kind", "chat", "--ca-file", file)
		if r.code != 2 || !strings.Contains(r.stderr, "--ca-file") {
			t.Errorf("send --ca-file %s: exit %d, stderr %q; want 2 naming --ca-file", file, r.code, r.stderr)
		}
	}
	r := runCLIEnv(t, bin, nil, "help", "tail")
	if !strings.Contains(r.stdout, "--ca-file FILE") || !strings.Contains(r.stdout, "MCPP_CA_FILE") {
		t.Errorf("mcpp help tail does not document --ca-file:\n%s", r.stdout)
	}
}
