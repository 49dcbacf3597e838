package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
)

// The tests of the CLI and the pod's history (docs/protocol.md section 8):
// mcpp tail --history, --resume-file (across a restart of the tail and of the
// gateway), and mcpp history. Each chooses history on itself (histOn), so
// that they pass whatever MCPP_TEST_HISTORY says.

// cliSendLines sends each line (a whole envelope) with mcpp send --stdin
// as participant from.
func cliSendLines(t *testing.T, bin, gw, pod, from string, lines ...string) {
	t.Helper()
	r := runCLI(t, bin, strings.Join(lines, "\n")+"\n", "send", "--gateway", gw, "--pod", pod, "--participant", from, "--stdin")
	if r.code != 0 {
		t.Fatalf("mcpp send --stdin: exit %d\n%s", r.code, r.stderr)
	}
}

// chatLine is an envelope with this id and text.
func chatLine(id string) string {
	return fmt.Sprintf(`{"id":%q,"kind":"chat","payload":{"text":%q}}`, id, id)
}

// cliIDs are the ids of the envelopes a CLI printed.
func cliIDs(t *testing.T, lines []string) []string {
	t.Helper()
	var ids []string
	for _, m := range decodeCLILines(t, lines) {
		ids = append(ids, m.Str("id"))
	}
	return ids
}

// readID is the id a resume file holds ("" when there is none).
func readID(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// kill ends a CLI process at once (SIGKILL: nothing flushed, nothing
// cleaned up).
func (p *cliProc) kill() {
	p.t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// TestCLITailResumeFile: a tail with --resume-file that is killed and
// started again prints what was sent meanwhile, nothing missing and
// nothing twice; the file names the last envelope printed that history
// keeps (not an ephemeral one).
func TestCLITailResumeFile(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := histOn(t, nil)
	gw := cliGateway(g)
	rf := filepath.Join(t.TempDir(), "tail.id")
	args := []string{"tail", "--gateway", gw, "--pod", "lab", "--participant", "watcher", "--resume-file", rf}

	t1 := startCLI(t, bin, args...)
	t1.waitWelcome()
	cliSendLines(t, bin, gw, "lab", "alice", chatLine("r-1"), chatLine("r-2"), chatLine("r-3"),
		`{"id":"e-1","kind":"chat","lifecycle":{"mode":"ephemeral"},"payload":{"text":"e-1"}}`)
	harness.Eventually(t, 10*time.Second, "the first tail's four envelopes", func() bool { return len(t1.lines()) == 4 })
	if got := strings.Join(cliIDs(t, t1.lines()), ","); got != "r-1,r-2,r-3,e-1" {
		t.Fatalf("the first tail printed %s", got)
	}
	harness.Eventually(t, 5*time.Second, "the resume file naming r-3", func() bool { return readID(rf) == "r-3" })
	time.Sleep(100 * time.Millisecond)
	if id := readID(rf); id != "r-3" {
		t.Fatalf("the resume file holds %q after an ephemeral envelope, want r-3 (the last one history keeps)", id)
	}
	t1.kill()

	cliSendLines(t, bin, gw, "lab", "alice", chatLine("r-4"), chatLine("r-5"), chatLine("r-6"))
	t2 := startCLI(t, bin, append(args, "--count", "3")...)
	if code := t2.wait(); code != 0 {
		t.Fatalf("the second tail exited %d\n%s", code, t2.stderr.String())
	}
	if got := strings.Join(cliIDs(t, t2.lines()), ","); got != "r-4,r-5,r-6" {
		t.Fatalf("the restarted tail printed %s, want r-4,r-5,r-6", got)
	}
	if !strings.Contains(t2.stderr.String(), `"resumed":true`) || strings.Contains(t2.stderr.String(), "may be missing") {
		t.Errorf("the restarted tail's stderr:\n%s", t2.stderr.String())
	}
	if id := readID(rf); id != "r-6" {
		t.Fatalf("the resume file holds %q, want r-6", id)
	}

	// Nothing new: a third tail prints nothing of the past, then what comes.
	t3 := startCLI(t, bin, append(args, "--count", "1")...)
	t3.waitWelcome()
	cliSendLines(t, bin, gw, "lab", "alice", chatLine("r-7"))
	if code := t3.wait(); code != 0 {
		t.Fatalf("the third tail exited %d\n%s", code, t3.stderr.String())
	}
	if got := strings.Join(cliIDs(t, t3.lines()), ","); got != "r-7" {
		t.Fatalf("the third tail printed %s, want r-7", got)
	}

	// An id the gateway does not have: it says so, and goes on (with the
	// --history past).
	if err := os.WriteFile(rf, []byte("no-such-id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t4 := startCLI(t, bin, append(args, "--history", "2", "--count", "2")...)
	if code := t4.wait(); code != 0 {
		t.Fatalf("the fourth tail exited %d\n%s", code, t4.stderr.String())
	}
	if got := strings.Join(cliIDs(t, t4.lines()), ","); got != "r-6,r-7" || !strings.Contains(t4.stderr.String(), "could not resume after no-such-id") {
		t.Fatalf("the tail resuming after an unknown id printed %s; stderr:\n%s", got, t4.stderr.String())
	}
}

// TestCLITailResumeAcrossGatewayRestart: the gateway keeps its history on
// disk (--history-dir). A running tail survives a restart of the gateway
// (the client reconnects and resumes), and a tail killed, then started
// again after another restart of the gateway, resumes from its
// --resume-file: nothing missing, nothing twice.
func TestCLITailResumeAcrossGatewayRestart(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	// --history 1000 (the default) keeps history on whatever
	// MCPP_TEST_HISTORY says: the flag wins over the MCPP_HISTORY=0 that
	// StartGatewayProc sets then.
	gp := harness.StartGatewayProc(t, nil, "--listen", fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)), "--history-dir", t.TempDir(), "--history", "1000")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", gp.Stderr)
		}
	})
	gp.WaitHealthy(30 * time.Second)
	gw := cliGateway(gp.GW)
	rf := filepath.Join(t.TempDir(), "tail.id")
	args := []string{"tail", "--gateway", gw, "--pod", "lab", "--participant", "watcher", "--resume-file", rf}

	t1 := startCLI(t, bin, args...)
	t1.waitWelcome()
	strict := startCLI(t, bin, "tail", "--gateway", gw, "--pod", "lab", "--participant", "strict", "--reconnect=0")
	strict.waitWelcome()
	cliSendLines(t, bin, gw, "lab", "alice", chatLine("g-1"), chatLine("g-2"))
	harness.Eventually(t, 10*time.Second, "g-1 and g-2 in the tail", func() bool { return len(t1.lines()) == 2 && readID(rf) == "g-2" })

	gp.Restart()
	// With --reconnect=0 a tail ends with the connection.
	if code := strict.wait(); code != 1 || !strings.Contains(strict.stderr.String(), "1001") {
		t.Errorf("tail --reconnect=0 across the gateway's restart: exit %d\n%s", code, strict.stderr.String())
	}
	cliSendLines(t, bin, gw, "lab", "alice", chatLine("g-3"), chatLine("g-4"))
	harness.Eventually(t, 30*time.Second, "g-3 and g-4 in the tail after the gateway's restart", func() bool { return len(t1.lines()) >= 4 })
	time.Sleep(200 * time.Millisecond)
	if got := strings.Join(cliIDs(t, t1.lines()), ","); got != "g-1,g-2,g-3,g-4" {
		t.Fatalf("the tail printed %s across the gateway's restart, want g-1,g-2,g-3,g-4\nstderr:\n%s", got, t1.stderr.String())
	}
	if strings.Contains(t1.stderr.String(), "may be missing") || strings.Count(t1.stderr.String(), `"kind":"system/welcome"`) != 2 ||
		!strings.Contains(t1.stderr.String(), `"history":{"resumed":true`) {
		t.Errorf("the tail did not reconnect once and resume:\n%s", t1.stderr.String())
	}
	harness.Eventually(t, 5*time.Second, "the resume file naming g-4", func() bool { return readID(rf) == "g-4" })
	t1.kill()

	gp.Restart()
	cliSendLines(t, bin, gw, "lab", "alice", chatLine("g-5"), chatLine("g-6"))
	t2 := startCLI(t, bin, append(args, "--count", "2")...)
	if code := t2.wait(); code != 0 {
		t.Fatalf("the restarted tail exited %d\n%s", code, t2.stderr.String())
	}
	if got := strings.Join(cliIDs(t, t2.lines()), ","); got != "g-5,g-6" {
		t.Fatalf("the tail restarted after the gateway printed %s, want g-5,g-6\nstderr:\n%s", got, t2.stderr.String())
	}
	if strings.Contains(t2.stderr.String(), "may be missing") || !strings.Contains(t2.stderr.String(), `"resumed":true`) {
		t.Errorf("the restarted tail did not resume:\n%s", t2.stderr.String())
	}
}

// historyPod fills pod with envelopes in a reasoning context that
// concludes, inside a task context, a context of its own, and a
// transient envelope consumed by a later one.
func historyPod(t *testing.T, bin, gw, pod string) {
	t.Helper()
	cliSendLines(t, bin, gw, pod, "bot",
		`{"id":"h-1","kind":"chat","payload":{"text":"main"}}`,
		`{"id":"h-2","kind":"task/start","context":{"id":"task-1","type":"task"}}`,
		`{"id":"h-3","kind":"reasoning/step","context":{"id":"reason-1","type":"reasoning","parent":"task-1"},"payload":{"text":"s1"}}`,
		`{"id":"h-4","kind":"reasoning/step","context":{"id":"reason-1"},"payload":{"text":"s2"}}`,
		`{"id":"h-5","kind":"conclusion","context":{"id":"reason-1"},"payload":{"summary":"plan B"}}`,
		`{"id":"h-6","kind":"note","context":{"id":"other","type":"note"}}`,
		`{"id":"h-7","kind":"activity","lifecycle":{"mode":"transient","summary":"15 activity records"},"payload":{"rows":[1,2,3]}}`,
		`{"id":"h-8","kind":"digest","lifecycle":{"consumes":["h-7"]},"payload":{"n":15}}`)
}

// historyIDs are the ids mcpp history printed, the system/context event
// of a context written ctx:ID.
func historyIDs(t *testing.T, r cliResult) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("mcpp history: exit %d\n%s", r.code, r.stderr)
	}
	var ids []string
	for _, m := range decodeCLILines(t, strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")) {
		if m.Kind() == "system/context" {
			ids = append(ids, "ctx:"+m.ContextID())
		} else {
			ids = append(ids, m.Str("id"))
		}
	}
	return strings.Join(ids, ",")
}

// TestCLIHistory: mcpp history prints the pod's history oldest first,
// folded (a concluded context as its conclusion and its event, a consumed
// transient envelope collapsed) or unfolded, of one context and its
// descendants, the newest N, and in the pretty view with folds and
// collapsed envelopes shown as such. It does not join the pod.
func TestCLIHistory(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := histOn(t, nil)
	gw := cliGateway(g)
	obs := g.Dial(t, "hist", "observer", "")
	historyPod(t, bin, gw, "hist")
	hist := func(args ...string) cliResult {
		return runCLI(t, bin, "", append([]string{"history", "--gateway", gw, "--pod", "hist"}, args...)...)
	}

	r := hist()
	if got := historyIDs(t, r); got != "h-1,h-2,h-5,ctx:reason-1,h-6,h-7,h-8" {
		t.Fatalf("history (folded): %s", got)
	}
	var collapsed harness.Msg
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.Contains(l, `"id":"h-7"`) {
			_ = json.Unmarshal([]byte(l), &collapsed)
		}
	}
	if p := collapsed.Payload(); p["collapsed"] != true || p["summary"] != "15 activity records" || p["consumed_by"] != "h-8" {
		t.Errorf("h-7 is not collapsed: %v", collapsed)
	}
	if r := hist("--json"); r.stdout != hist().stdout {
		t.Errorf("--json is not the default output:\n%s", r.stdout)
	}

	if got := historyIDs(t, hist("--fold=false")); got != "h-1,h-2,h-3,h-4,h-5,ctx:reason-1,h-6,h-7,h-8" {
		t.Fatalf("history --fold=false: %s", got)
	}
	if r := hist("--fold=0"); !strings.Contains(r.stdout, `"rows":[1,2,3]`) {
		t.Errorf("history --fold=0 collapsed h-7:\n%s", r.stdout)
	}
	if got := historyIDs(t, hist("--context", "task-1")); got != "h-2,h-5,ctx:reason-1" {
		t.Fatalf("history --context task-1: %s", got)
	}
	if got := historyIDs(t, hist("--context", "task-1", "--fold=0")); got != "h-2,h-3,h-4,h-5,ctx:reason-1" {
		t.Fatalf("history --context task-1 --fold=0: %s", got)
	}
	if got := historyIDs(t, hist("--context", "reason-1", "--fold=0")); got != "h-3,h-4,h-5,ctx:reason-1" {
		t.Fatalf("history --context reason-1 --fold=0: %s", got)
	}
	r = hist("--limit", "2")
	if got := historyIDs(t, r); got != "h-7,h-8" || !strings.Contains(r.stderr, "older envelopes left out") {
		t.Fatalf("history --limit 2: %s\n%s", got, r.stderr)
	}

	r = hist("--pretty")
	if r.code != 0 {
		t.Fatalf("history --pretty: exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 7 {
		t.Fatalf("history --pretty printed %d lines:\n%s", len(lines), r.stdout)
	}
	for i, want := range []string{
		`{"text":"main"}`,
		"[task-1 task]",
		`⤶ fold {"summary":"plan B"}`,
		"concluded (conclusion): 3 messages from 1 participants ⤶ folded: 2 of its envelopes left out",
		"[other note]",
		"⊟ collapsed, consumed by h-8: 15 activity records",
		`{"n":15}`,
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("history --pretty line %d is %q, want it to contain %q", i+1, lines[i], want)
		}
	}
	if !strings.Contains(lines[2], "  [reason-1 reasoning]") {
		t.Errorf("the fold of reason-1 is not shown in its context, under task-1: %q", lines[2])
	}
	if r := hist("--pretty", "--fold=0"); strings.Contains(r.stdout, "fold") || strings.Contains(r.stdout, "collapsed") ||
		!strings.Contains(r.stdout, `{"text":"s1"}`) {
		t.Errorf("history --pretty --fold=0:\n%s", r.stdout)
	}

	// An empty pod, and usage errors.
	if r := runCLI(t, bin, "", "history", "--gateway", gw, "--pod", "empty"); r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no history") {
		t.Errorf("history of an empty pod: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"--json", "--pretty"}, {"--limit", "-1"}, {"--fold", "0"}} {
		if r := hist(args...); r.code != 2 {
			t.Errorf("history %v: exit %d, want 2", args, r.code)
		}
	}
	// The observer got the eight envelopes and the event, and saw nobody
	// join or leave: neither the sends nor the history requests joined.
	n := 0
	for m := obs.Next(time.Second); m != nil; m = obs.Next(300 * time.Millisecond) {
		if m.Kind() == "system/presence" {
			t.Fatalf("the observer saw %v", m)
		}
		n++
	}
	if n != 9 {
		t.Errorf("the observer got %d envelopes, want 9", n)
	}
}

// TestCLIHistoryPages: a history longer than one answer holds (4 ×
// --max-message-bytes) is read page by page, oldest first, none twice.
func TestCLIHistoryPages(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := histOn(t, func(c *gateway.Config) { c.MaxMessageBytes = 1024 })
	gw := cliGateway(g)
	var lines, want []string
	pad := strings.Repeat("x", 150)
	for i := range 60 {
		id := fmt.Sprintf("p-%02d", i)
		lines = append(lines, fmt.Sprintf(`{"id":%q,"kind":"chat","payload":{"pad":%q}}`, id, pad))
		want = append(want, id)
	}
	cliSendLines(t, bin, gw, "pages", "bot", lines...)

	// One request does not hold it all.
	resp, err := http.Post(g.URL+"/pods/pages/envelopes?participant=probe", "application/json",
		bytes.NewReader([]byte(`{"kind":"gateway/history","id":"q","payload":{"limit":1000}}`)))
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Results []struct {
			Answer struct {
				Envelopes []json.RawMessage `json:"envelopes"`
				More      bool              `json:"more"`
			} `json:"answer"`
		} `json:"results"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if len(ans.Results) != 1 || !ans.Results[0].Answer.More || len(ans.Results[0].Answer.Envelopes) >= 60 {
		t.Fatalf("one gateway/history answer holds %d envelopes (more %v): the test needs several pages", len(ans.Results[0].Answer.Envelopes), ans.Results[0].Answer.More)
	}

	r := runCLI(t, bin, "", "history", "--gateway", gw, "--pod", "pages")
	if got := historyIDs(t, r); got != strings.Join(want, ",") {
		t.Fatalf("history of 60 envelopes: %s", got)
	}
	r = runCLI(t, bin, "", "history", "--gateway", gw, "--pod", "pages", "--limit", "25")
	if got := historyIDs(t, r); got != strings.Join(want[35:], ",") {
		t.Fatalf("history --limit 25: %s", got)
	}
}

// TestCLITailHistoryPretty: tail --history shows the past first, folded:
// after a concluded context, its conclusion marked as a fold and its
// event saying how many envelopes were left out; then live envelopes.
func TestCLITailHistoryPretty(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	g := histOn(t, nil)
	gw := cliGateway(g)
	cliSendLines(t, bin, gw, "lab", "alice",
		`{"id":"m-1","kind":"chat","payload":{"text":"before"}}`,
		`{"id":"s-1","kind":"reasoning/step","context":{"id":"r1","type":"reasoning"},"payload":{"text":"s1"}}`,
		`{"id":"s-2","kind":"reasoning/step","context":{"id":"r1"},"payload":{"text":"s2"}}`,
		`{"id":"c-1","kind":"conclusion","context":{"id":"r1"},"payload":{"summary":"done"}}`)

	tail := startCLI(t, bin, "tail", "--gateway", gw, "--pod", "lab", "--history", "20", "--pretty", "--count", "4")
	tail.waitWelcome()
	harness.Eventually(t, 10*time.Second, "the replayed history", func() bool { return len(tail.lines()) == 3 })
	cliSendLines(t, bin, gw, "lab", "alice", `{"id":"m-2","kind":"chat","payload":{"text":"live"}}`)
	if code := tail.wait(); code != 0 {
		t.Fatalf("tail exited %d\n%s", code, tail.stderr.String())
	}
	lines := tail.lines()
	if len(lines) != 4 || !strings.Contains(lines[0], `{"text":"before"}`) ||
		!strings.Contains(lines[1], "conclusion") || !strings.Contains(lines[1], `⤶ fold {"summary":"done"}`) ||
		!strings.Contains(lines[2], "system/context") || !strings.Contains(lines[2], "⤶ folded: 2 of its envelopes left out") ||
		!strings.Contains(lines[3], `{"text":"live"}`) || strings.Contains(lines[3], "fold") || strings.Contains(tail.stdout.String(), "s1") {
		t.Fatalf("tail --history 20 --pretty printed:\n%s", tail.stdout.String())
	}
	if !strings.Contains(tail.stderr.String(), "3 envelopes of history follow, folded (2 left out, 0 collapsed)") {
		t.Errorf("the welcome does not say what history follows:\n%s", tail.stderr.String())
	}

	// Unfolded, and raw: the bytes of the envelopes, oldest first.
	r := runCLI(t, bin, "", "tail", "--gateway", gw, "--pod", "lab", "--history", "all", "--fold=0", "--count", "6", "--quiet")
	if got := strings.Join(cliIDs(t, strings.Split(strings.TrimSpace(r.stdout), "\n")), ","); r.code != 0 || !strings.HasPrefix(got, "m-1,s-1,s-2,c-1,") || !strings.HasSuffix(got, ",m-2") {
		t.Fatalf("tail --history all --fold=0: exit %d, %s\n%s", r.code, got, r.stderr)
	}
	r = runCLI(t, bin, "", "tail", "--gateway", gw, "--pod", "lab", "--history", "1", "--count", "1", "--quiet")
	if got := strings.Join(cliIDs(t, strings.Split(strings.TrimSpace(r.stdout), "\n")), ","); r.code != 0 || got != "m-2" {
		t.Fatalf("tail --history 1: exit %d, %s\n%s", r.code, got, r.stderr)
	}
	if r := runCLI(t, bin, "", "tail", "--gateway", gw, "--pod", "lab", "--history", "-3"); r.code != 2 {
		t.Errorf("tail --history -3: exit %d, want 2", r.code)
	}
}

// TestCLIHistoryUsage: the usage texts describe history and resuming.
func TestCLIHistoryUsage(t *testing.T) {
	bin := harness.BuildCommand(t, "mcpp")
	r := runCLI(t, bin, "", "help")
	if r.code != 0 || !strings.Contains(r.stdout, "history") {
		t.Errorf("mcpp help: %q", r.stdout)
	}
	r = runCLI(t, bin, "", "tail", "-h")
	for _, want := range []string{"--history N|all", "--fold=0", "--resume-file F", "--reconnect=0", "⤶ fold"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("mcpp tail -h does not mention %s", want)
		}
	}
	r = runCLI(t, bin, "", "history", "-h")
	for _, want := range []string{"--fold=0", "--context ID", "--limit N", "--json", "--pretty", "collapsed, consumed by ID", "does not join"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("mcpp history -h does not mention %s", want)
		}
	}
	r = runCLI(t, bin, "", "send", "-h")
	for _, want := range []string{"/pods/NAME/envelopes", "--wait DURATION", "--rate N"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("mcpp send -h does not mention %s", want)
		}
	}
}
