package integration

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// limRunFails runs the gateway with env and args and returns its exit code
// and its output; it must exit by itself. When it starts instead, the test
// fails and the code is -1.
func limRunFails(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(harness.BuildCommand(t, "mcpp-gateway"), args...)
	cmd.Env = append(harness.EnvWithoutMCPP(), env...)
	var out harness.SyncBuffer
	cmd.Stderr = &out
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-done:
			return cmd.ProcessState.ExitCode(), out.String()
		case <-deadline:
		case <-time.After(20 * time.Millisecond):
			if !harness.GatewayAddrRE.MatchString(out.String()) {
				continue
			}
		}
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("mcpp-gateway %v with %v started; want it to refuse the setting:\n%s", args, env, out.String())
		return -1, out.String()
	}
}

// TestLimitsFromEnvironment runs the daemon with limits set as MCPP_
// variables, some also given as flags: the welcome shows the values in
// force (the flag's where both are given) and the gateway enforces them.
func TestLimitsFromEnvironment(t *testing.T) {
	t.Parallel()
	p := harness.StartGatewayProc(t, []string{
		"MCPP_LISTEN=127.0.0.1:0",
		"MCPP_RATE=7",
		"MCPP_BURST=9",
		"MCPP_MAX_DEPTH=3",
		"MCPP_MAX_MESSAGE_BYTES=5000",
		"MCPP_MAX_CONTEXT_BYTES=600",
		"MCPP_CONTEXT_RATE=4.5",
		"MCPP_CONTEXT_BURST=6",
		"MCPP_CONTEXT_CREATE_RATE=2",
		"MCPP_CONTEXT_CREATE_BURST=3",
		"MCPP_CONTEXT_TIMEOUT=90s",
		"MCPP_CONTEXT_RETENTION=2m",
		"MCPP_CONCLUSION_KINDS=done,finish",
		"MCPP_MAX_CONTEXTS_PER_PARTICIPANT=12",
		"MCPP_MAX_CONTEXTS_PER_POD=77",
		"MCPP_MAX_PARTICIPANTS_PER_POD=2",
		"MCPP_MAX_CONNECTIONS=50",
		"MCPP_MAX_PODS=5",
		"MCPP_SEND_QUEUE=100",
	}, "--rate", "11", "--context-timeout=45s", "--max-contexts-per-pod", "78")
	g := p.GW
	a := g.Dial(t, "limits-env", "a", "")
	limits, _ := a.Welcome.Payload()["limits"].(map[string]any)
	want := map[string]string{
		"rate":                         "11", // flag over MCPP_RATE=7
		"burst":                        "9",
		"max_depth":                    "3",
		"max_message_bytes":            "5000",
		"max_context_bytes":            "600",
		"context_rate":                 "4.5",
		"context_burst":                "6",
		"context_create_rate":          "2",
		"context_create_burst":         "3",
		"context_timeout_ms":           "45000", // flag over MCPP_CONTEXT_TIMEOUT=90s
		"context_retention_ms":         "120000",
		"conclusion_kinds":             "[done finish]",
		"max_contexts_per_participant": "12",
		"max_contexts_per_pod":         "78", // flag over MCPP_MAX_CONTEXTS_PER_POD=77
		"max_participants_per_pod":     "2",
		"max_connections":              "50",
		"max_pods":                     "5",
		"send_queue":                   "100",
	}
	for k, v := range want {
		if got, ok := limits[k]; !ok {
			t.Errorf("the welcome's limits lack %s", k)
		} else if fmt.Sprint(got) != v {
			t.Errorf("limits.%s = %v, want %s", k, got, v)
		}
	}

	// And it enforces them.
	b := g.Dial(t, "limits-env", "b", "")
	a.ExpectPresence("join", "b")
	if status, code := harness.Refusal(t, g.WS, harness.JoinQuery("limits-env", "c"), nil); status != http.StatusServiceUnavailable || code != "over_capacity" {
		t.Fatalf("a third participant: %d %s, want 503 over_capacity (MCPP_MAX_PARTICIPANTS_PER_POD=2)", status, code)
	}
	a.SendRaw(harness.EnvelopeJSON(t, "deep", "chat", "x/y/z/w"))
	a.ExpectErr("context_depth_exceeded")
	a.SendRaw(harness.EnvelopeJSON(t, "deep-ok", "chat", "x/y/z"))
	if m := b.ExpectOther("chat"); m.Str("id") != "deep-ok" {
		t.Fatalf("got %v, want deep-ok", m)
	}
	a.Send(map[string]any{"id": "too-big", "kind": "chat", "payload": strings.Repeat("x", 5000)})
	a.ExpectErr("message_too_large")
	a.SendRaw(harness.EnvelopeJSON(t, "end", "done", "x/y/z"))
	b.ExpectOther("done")
	if ev := b.ExpectOther("system/context"); ev.ContextID() != "x/y/z" || ev.Payload()["reason"] != "conclusion" {
		t.Fatalf("got %v, want x/y/z concluded by the conclusion kind done", ev)
	}
}

// TestLimitsEnvironmentErrors: a limit the gateway cannot use, from the
// environment or a flag, stops it at start with a message naming it,
// rather than a gateway that breaks at the first participant.
func TestLimitsEnvironmentErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{env: []string{"MCPP_RATE=fast"}, want: "MCPP_RATE"},
		{env: []string{"MCPP_MAX_DEPTH=0"}, want: "max-depth"},
		{env: []string{"MCPP_RATE=NaN"}, want: "rate"},
		{args: []string{"--rate=Inf"}, want: "rate"},
		{env: []string{"MCPP_CONTEXT_RATE=+Inf"}, want: "rate"},
		{env: []string{"MCPP_CONTEXT_TIMEOUT=2500000h"}, want: "context-timeout"},
	} {
		env := append([]string{"MCPP_LISTEN=127.0.0.1:0"}, tc.env...)
		code, out := limRunFails(t, env, tc.args...)
		if code == -1 {
			continue
		}
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want a non-zero exit naming %s", tc.env, tc.args, code, out, tc.want)
		}
	}
}
