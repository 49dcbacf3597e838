package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// The tests of cmd/mcpp: the CLI built and run as a process against an
// in-process gateway (and, in cli_history_test.go, against the
// mcpp-gateway binary where the gateway restarts).

// cliEnv is the environment of a CLI process: the test's, without the
// MCPP_* variables the CLI reads as defaults.
func cliEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPP_") && !strings.HasPrefix(kv, "NO_COLOR=") {
			out = append(out, kv)
		}
	}
	return out
}

// cliResult is a finished CLI process.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI to its end with stdin as standard input.
func runCLI(t *testing.T, bin, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cliEnv()
	cmd.Stdin = strings.NewReader(stdin)
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

// cliProc is a CLI process running in the background (tail).
type cliProc struct {
	t              *testing.T
	args           []string
	cmd            *exec.Cmd
	stdout, stderr *harness.SyncBuffer
	done           chan struct{}
	err            error
}

func startCLI(t *testing.T, bin string, args ...string) *cliProc {
	t.Helper()
	p := &cliProc{t: t, args: args, stdout: &harness.SyncBuffer{}, stderr: &harness.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = cliEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// A child the command started (a bridge's MCP server) may outlive it
	// holding its output: Wait gives up on the output then, once the
	// command itself has exited.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitWelcome waits until a tail has joined: it prints the welcome (raw
// or pretty) on standard error.
func (p *cliProc) waitWelcome() {
	p.t.Helper()
	harness.Eventually(p.t, 10*time.Second, "the welcome of mcpp "+strings.Join(p.args, " "), func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("mcpp %v ended before its welcome: %v\nstderr:\n%s", p.args, p.err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stderr.String(), "system/welcome") || strings.Contains(p.stdout.String(), "system/welcome")
	})
}

// wait waits for the process to end by itself and returns its exit code.
func (p *cliProc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Fatalf("mcpp %v still running after 20s; stdout:\n%s\nstderr:\n%s", p.args, p.stdout.String(), p.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	p.t.Fatalf("mcpp %v: %v", p.args, p.err)
	return -1
}

// lines returns the process's standard output, one string a line.
func (p *cliProc) lines() []string {
	s := strings.TrimRight(p.stdout.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// decodeCLILines decodes each line as an envelope, failing on a line that is not
// one JSON object.
func decodeCLILines(t *testing.T, lines []string) []harness.Msg {
	t.Helper()
	out := make([]harness.Msg, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatalf("output line %d is not a JSON object: %q", i+1, l)
		}
	}
	return out
}

func cliText(m harness.Msg) string {
	s, _ := m.Payload()["text"].(string)
	return s
}

// cliGateway is the gateway's base URL (--gateway also takes the /ws URL).
func cliGateway(g *harness.Gateway) string { return strings.TrimSuffix(g.WS, "/ws") }

func TestCLITailFilterSeesMainNotReasoning(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	gw := cliGateway(g)

	// main-only joins first, so that it sees the two others join (send
	// does not join: it publishes over HTTP).
	mainOnly := startCLI(t, bin, "tail", "--gateway", gw, "--pod", "lab", "--participant", "main-only", "--contexts", "none", "--count", "2")
	mainOnly.waitWelcome()
	everything := startCLI(t, bin, "tail", "--gateway", g.WS, "--pod", "lab", "--participant", "everything", "--count", "4")
	pretty := startCLI(t, bin, "tail", "--gateway", gw, "--pod", "lab", "--participant", "pretty", "--pretty", "--count", "4")
	everything.waitWelcome()
	pretty.waitWelcome()

	send := func(args ...string) {
		t.Helper()
		args = append([]string{"send", "--gateway", gw, "--pod", "lab", "--participant", "alice", "--kind", "chat"}, args...)
		if r := runCLI(t, bin, "", args...); r.code != 0 {
			t.Fatalf("mcpp %v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	// A reasoning context first: a tail that failed to filter it would
	// count it among its two.
	send("--context", `{"id":"r1","type":"reasoning"}`, "--payload", `{"text":"hidden-1"}`)
	send("--payload", `{"text":"one"}`)
	send("--context", `{"id":"r1","type":"reasoning"}`, "--payload", `{"text":"hidden-2"}`)
	send("--payload", `{"text":"two"}`)

	if code := mainOnly.wait(); code != 0 {
		t.Fatalf("tail --count 2 exited %d\n%s", code, mainOnly.stderr.String())
	}
	got := decodeCLILines(t, mainOnly.lines())
	if len(got) != 2 || cliText(got[0]) != "one" || cliText(got[1]) != "two" {
		t.Fatalf("tail --contexts none printed %v, want the main envelopes one and two", mainOnly.lines())
	}
	for _, m := range got {
		if m.Str("from") != "alice" || m.Kind() != "chat" || m["context"] != nil {
			t.Errorf("unexpected envelope %v", m)
		}
	}
	// The filter was the gateway's: the welcome (on stderr) shows it.
	if !strings.Contains(mainOnly.stderr.String(), `"contexts":"none"`) {
		t.Errorf("the welcome does not show the filter contexts=none:\n%s", mainOnly.stderr.String())
	}
	// Presence (the other tails joining) went to stderr and was not counted.
	if !strings.Contains(mainOnly.stderr.String(), `"kind":"system/presence"`) {
		t.Errorf("no presence on stderr:\n%s", mainOnly.stderr.String())
	}

	if code := everything.wait(); code != 0 {
		t.Fatalf("tail --count 4 exited %d\n%s", code, everything.stderr.String())
	}
	var texts []string
	for _, m := range decodeCLILines(t, everything.lines()) {
		texts = append(texts, cliText(m))
	}
	if strings.Join(texts, ",") != "hidden-1,one,hidden-2,two" {
		t.Fatalf("tail without a filter printed %v, want hidden-1,one,hidden-2,two", texts)
	}

	if code := pretty.wait(); code != 0 {
		t.Fatalf("tail --pretty exited %d\n%s", code, pretty.stderr.String())
	}
	pl := pretty.lines()
	if len(pl) != 4 || !strings.Contains(pl[0], "[r1 reasoning]") || !strings.Contains(pl[0], "alice") ||
		!strings.Contains(pl[1], `{"text":"one"}`) || strings.Contains(pl[1], "[") || strings.Contains(pl[0], "\x1b[") {
		t.Fatalf("tail --pretty printed:\n%s", pretty.stdout.String())
	}
}

func TestCLITailCountAll(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	// With --all the welcome is output, and it counts.
	r := runCLI(t, bin, "", "tail", "--gateway", cliGateway(g), "--pod", "lab", "--all", "--count", "1")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := decodeCLILines(t, strings.Split(strings.TrimSpace(r.stdout), "\n"))
	if len(got) != 1 || got[0].Kind() != "system/welcome" {
		t.Fatalf("tail --all --count 1 printed %q", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
}

func TestCLISendRefused(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	gw := cliGateway(g)
	obs := g.Dial(t, "lab", "observer", "")
	base := []string{"send", "--gateway", gw, "--pod", "lab", "--participant", "alice"}
	sendArgs := func(args ...string) []string { return append(append([]string{}, base...), args...) }

	for _, c := range []struct {
		args []string
		code string
	}{
		{[]string{"--kind", "system/x", "--id", "env-42"}, "reserved_kind"},
		{[]string{"--kind", "chat", "--context", "bad path!"}, "invalid_context"},
		{[]string{"--kind", "chat", "--context", `{"id":"c","parent":"c"}`}, "context_cycle"},
	} {
		r := runCLI(t, bin, "", sendArgs(c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.code) {
			t.Errorf("send %v: exit %d, stderr %q; want 1 and %s", c.args, r.code, r.stderr, c.code)
		}
	}
	if r := runCLI(t, bin, "", sendArgs("--kind", "system/x", "--id", "env-42")...); !strings.Contains(r.stderr, "env-42") {
		t.Errorf("the error does not name the envelope: %q", r.stderr)
	}

	// Nothing refused was relayed; an accepted envelope is, with its fields.
	r := runCLI(t, bin, "", sendArgs("--kind", "chat", "--to", "observer,bob", "--correlation-id", "c-1",
		"--context", "task/step", "--payload", `{"text":"ok"}`, "--id", "e-1")...)
	if r.code != 0 {
		t.Fatalf("send: exit %d: %s", r.code, r.stderr)
	}
	m := obs.NextNonPresence(5 * time.Second)
	if m == nil || m.Str("id") != "e-1" || cliText(m) != "ok" || m.Str("correlation_id") != "c-1" ||
		m["context"] != "task/step" || len(m["to"].([]any)) != 2 {
		t.Fatalf("observer got %v", m)
	}

	// --stdin: one envelope a line; the refused line is reported by number.
	stdin := `{"kind":"chat","payload":{"text":"line-1"}}` + "\n\n" +
		`{"kind":"system/nope","id":"bad-one"}` + "\n" +
		`{"payload":{"text":"line-4"}}` + "\n"
	r = runCLI(t, bin, stdin, sendArgs("--stdin", "--kind", "chat")...)
	if r.code != 1 || !strings.Contains(r.stderr, "reserved_kind") || !strings.Contains(r.stderr, "line 3") ||
		strings.Contains(r.stderr, "line 1") || strings.Contains(r.stderr, "line 4") {
		t.Fatalf("send --stdin: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"line-1", "line-4"} {
		if m := obs.NextNonPresence(5 * time.Second); m == nil || cliText(m) != want || m.Kind() != "chat" {
			t.Fatalf("observer got %v, want %s", m, want)
		}
	}

	// A line that is not an envelope stops the input: usage, exit 2.
	if r := runCLI(t, bin, "not json\n", sendArgs("--stdin", "--kind", "chat")...); r.code != 2 {
		t.Errorf("send --stdin with a bad line: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestCLIRefusedUpgrade(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	gw := cliGateway(g)
	for _, c := range []struct {
		args []string
		code string
	}{
		{[]string{"tail", "--gateway", gw, "--pod", "bad pod!"}, `"error":"invalid_pod"`},
		{[]string{"tail", "--gateway", gw, "--pod", "lab", "--contexts", "maybe"}, `"error":"invalid_filter"`},
		{[]string{"send", "--gateway", gw, "--pod", "lab", "--participant", "system:me", "--kind", "chat"}, `"error":"invalid_participant"`},
		{[]string{"contexts", "--gateway", gw, "--pod", "x/y"}, `"error":"invalid_pod"`},
	} {
		r := runCLI(t, bin, "", c.args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.code) {
			t.Errorf("mcpp %v: exit %d, stderr %q; want 1 and %s", c.args, r.code, r.stderr, c.code)
		}
	}
}

func TestCLIContextsTree(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	gw := cliGateway(g)
	stdin := `{"kind":"chat","context":{"id":"task-1","type":"task"}}
{"kind":"chat","context":{"id":"reason-1","type":"reasoning","parent":"task-1"}}
{"kind":"chat","context":{"id":"reason-1"}}
{"kind":"chat","context":{"id":"orphan","type":"note","parent":"ghost"}}
`
	if r := runCLI(t, bin, stdin, "send", "--gateway", gw, "--pod", "lab", "--participant", "alice", "--stdin"); r.code != 0 {
		t.Fatalf("send: exit %d: %s", r.code, r.stderr)
	}

	r := runCLI(t, bin, "", "contexts", "--gateway", gw, "--pod", "lab")
	if r.code != 0 {
		t.Fatalf("contexts: exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	find := func(id string) int {
		for i, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == id {
				return i
			}
		}
		t.Fatalf("no line for %s in:\n%s", id, r.stdout)
		return -1
	}
	task, reason, orphan := find("task-1"), find("reason-1"), find("orphan")
	if !strings.HasPrefix(lines[task], "task-1 ") {
		t.Errorf("the root is indented: %q", lines[task])
	}
	if reason != task+1 || !strings.HasPrefix(lines[reason], "  reason-1 ") {
		t.Errorf("reason-1 is not indented under task-1:\n%s", r.stdout)
	}
	if f := strings.Fields(lines[reason]); len(f) < 4 || f[1] != "reasoning" || f[2] != "active" || f[3] != "2" {
		t.Errorf("reason-1's type, state and message count: %q", lines[reason])
	}
	if !strings.HasPrefix(lines[orphan], "orphan ") || !strings.Contains(lines[orphan], "(parent ghost)") {
		t.Errorf("the context with an unknown parent: %q", lines[orphan])
	}

	// --json is the gateway's answer as received.
	r = runCLI(t, bin, "", "contexts", "--gateway", gw, "--pod", "lab", "--json")
	var ans harness.Msg
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ans) != nil || ans.Kind() != "system/contexts" {
		t.Fatalf("contexts --json: exit %d, %q", r.code, r.stdout)
	}
	if list, _ := ans.Payload()["contexts"].([]any); len(list) != 3 {
		t.Errorf("contexts --json lists %d contexts, want 3: %s", len(list), r.stdout)
	}

	// A conclusion moves reason-1 to the concluded list, with its reason.
	if r := runCLI(t, bin, "", "send", "--gateway", gw, "--pod", "lab", "--participant", "alice",
		"--kind", "conclusion", "--context", `{"id":"reason-1"}`); r.code != 0 {
		t.Fatalf("send: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, bin, "", "contexts", "--gateway", gw, "--pod", "lab", "--state", "concluded")
	if r.code != 0 || !strings.Contains(r.stdout, "reason-1") || !strings.Contains(r.stdout, "concluded (conclusion)") ||
		!strings.Contains(r.stdout, "(parent task-1)") || strings.Contains(r.stdout, "orphan") {
		t.Fatalf("contexts --state concluded: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, bin, "", "contexts", "--gateway", gw, "--pod", "empty")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no active contexts") {
		t.Errorf("contexts of an empty pod: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestCLIUsage(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"tail"}, // no --pod
		{"tail", "--pod", "lab", "--main", "0"},
		{"send", "--pod", "lab"}, // no --kind
		{"send", "--pod", "lab", "--kind", "chat", "--payload", "{not json"},
		{"contexts", "--pod", "lab", "--state", "sleeping"},
		{"contexts", "--pod", "lab", "--bogus"},
	} {
		r := runCLI(t, bin, "", args...)
		if r.code != 2 || r.stderr == "" {
			t.Errorf("mcpp %v: exit %d, stderr %q; want 2 and a message", args, r.code, r.stderr)
		}
	}
	if r := runCLI(t, bin, "", "help"); r.code != 0 || !strings.Contains(r.stdout, "tail") || !strings.Contains(r.stdout, "contexts") {
		t.Errorf("mcpp help: exit %d, %q", r.code, r.stdout)
	}
}

// TestCLISendDoesNotJoin: mcpp send, contexts and history publish over
// HTTP (POST /pods/NAME/envelopes), so a tail sees what they send and no
// join or leave of theirs.
func TestCLISendDoesNotJoin(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := harness.StartGateway(t, nil)
	gw := cliGateway(g)
	tail := startCLI(t, bin, "tail", "--gateway", gw, "--pod", "lab", "--participant", "watcher", "--all")
	tail.waitWelcome()

	base := []string{"--gateway", gw, "--pod", "lab"}
	for _, args := range [][]string{
		{"send", "--participant", "alice", "--kind", "chat", "--payload", `{"text":"one"}`},
		{"send", "--kind", "chat", "--payload", `{"text":"two"}`}, // no participant: a made-up one
		{"contexts"},
		{"history"},
	} {
		args = append(append(args[:1:1], base...), args[1:]...)
		if r := runCLI(t, bin, "", args...); r.code != 0 {
			t.Fatalf("mcpp %v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	stdin := `{"kind":"chat","payload":{"text":"three"}}` + "\n" + `{"kind":"chat","payload":{"text":"four"}}` + "\n"
	if r := runCLI(t, bin, stdin, append([]string{"send", "--participant", "bob", "--stdin"}, base...)...); r.code != 0 {
		t.Fatalf("send --stdin: exit %d\n%s", r.code, r.stderr)
	}
	harness.Eventually(t, 10*time.Second, "the four envelopes in the tail", func() bool { return len(tail.lines()) >= 5 })
	time.Sleep(300 * time.Millisecond) // a leave would come right after
	got := decodeCLILines(t, tail.lines())
	var texts []string
	for _, m := range got[1:] {
		texts = append(texts, cliText(m))
		if m.Kind() != "chat" {
			t.Errorf("the tail printed %v", m)
		}
	}
	if got[0].Kind() != "system/welcome" || strings.Join(texts, ",") != "one,two,three,four" {
		t.Fatalf("the tail printed:\n%s", tail.stdout.String())
	}
	if strings.Contains(tail.stdout.String()+tail.stderr.String(), "system/presence") {
		t.Fatalf("the tail saw a presence event:\n%s\n%s", tail.stdout.String(), tail.stderr.String())
	}
	if from := got[2].Str("from"); !strings.HasPrefix(from, "anon-") {
		t.Errorf("send without --participant sent as %q, want a made-up anon-… id", from)
	}
}
