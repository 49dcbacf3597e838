package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinDir holds the commands built once for the tests that run processes.
var (
	BinDir  string
	binOnce sync.Once
	binErr  error
)

// Run runs the tests of m (TestMain calls it) and removes the commands
// BuildCommand built.
func Run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mcpp-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	BinDir = dir
	defer os.RemoveAll(dir)
	return m.Run()
}

// BuildCommand builds ./cmd/NAME once and returns the binary's path.
func BuildCommand(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(BinDir, name)
	binOnce.Do(func() {
		for _, n := range []string{"mcpp-gateway", "mcpp"} {
			// Built without -race: the in-process tests run the same code
			// under the race detector, and a race build of the embedded
			// NATS server takes minutes on a CI machine.
			// By import path, so that a test package anywhere under
			// integration/ builds the same commands.
			cmd := exec.Command("go", "build", "-o", filepath.Join(BinDir, n), "github.com/mcpp/gateway/cmd/"+n)
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", n, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return path
}

// GatewayProc is mcpp-gateway run as an operator runs it: the limit, cluster,
// history and CLI tests start it with StartGatewayProc, and restart runs it
// again with the same environment and arguments.
type GatewayProc struct {
	t      *testing.T
	bin    string
	env    []string // the whole environment of the process
	args   []string
	Cmd    *exec.Cmd   // the current run
	Stderr *SyncBuffer // of every run
	Exited chan struct{}
	GW     *Gateway // URL and WS only
}

var GatewayAddrRE = regexp.MustCompile(`mcpp-gateway listening"? addr=(127\.0\.0\.1:\d+)`)

// EnvWithoutMCPP is the test's environment without any MCPP_ variable, so
// that the ones a test sets are the only ones.
func EnvWithoutMCPP() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MCPP_") {
			env = append(env, kv)
		}
	}
	return env
}

// StartGatewayProc runs the gateway with env and args and waits until it
// listens. It is stopped with SIGTERM when the test ends.
func StartGatewayProc(t *testing.T, env []string, args ...string) *GatewayProc {
	t.Helper()
	p, err := TryStartGatewayProc(t, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TryStartGatewayProc is StartGatewayProc that reports a gateway that
// exited or did not listen instead of failing the test: a cluster test
// picks its ports before its nodes bind them (FreePort), and tries again
// with others when one was taken meanwhile (PortTaken).
func TryStartGatewayProc(t *testing.T, env []string, args ...string) (*GatewayProc, error) {
	t.Helper()
	p := &GatewayProc{t: t, bin: BuildCommand(t, "mcpp-gateway"), args: args, Stderr: &SyncBuffer{}}
	p.env = EnvWithoutMCPP()
	if HistoryOff() {
		p.env = append(p.env, "MCPP_HISTORY=0") // the test's own env and flags win
	}
	p.env = append(p.env, env...)
	t.Cleanup(p.stop)
	return p, p.start()
}

// PortTaken reports whether a gateway that did not start says that a
// port it was to listen on was taken.
func PortTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// start runs the gateway and waits until it listens.
func (p *GatewayProc) start() error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	p.Cmd, p.Exited = cmd, exited
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.Stderr, line)
			if m := GatewayAddrRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	// The gateway waits up to 30 s for its embedded NATS server.
	select {
	case a := <-addr:
		p.GW = GatewayAt(a)
		return nil
	case <-exited:
		return fmt.Errorf("mcpp-gateway exited (%v) before listening:\n%s", cmd.ProcessState, p.Stderr)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("mcpp-gateway did not listen within 60s:\n%s", p.Stderr)
	}
}

// Stop ends the gateway now, as the test's end would (stop).
func (p *GatewayProc) Stop() { p.stop() }

// stop ends the gateway with SIGTERM, as an operator restarting it does,
// and kills it when it has not exited within 20s.
func (p *GatewayProc) stop() {
	if p.Cmd == nil {
		return
	}
	select {
	case <-p.Exited:
		return // killed by the test, and not started again
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGCONT) // a test may have paused it
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
	case <-time.After(20 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// Restart stops the gateway and runs it again with the same environment
// and arguments (on the same address when --listen names a port), waiting
// until its /healthz answers 200.
func (p *GatewayProc) Restart() {
	p.t.Helper()
	p.stop()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
	p.WaitHealthy(30 * time.Second)
}

// Kill ends the gateway with SIGKILL, as a crash would: no drain, no
// close frames, nothing written behind. Start runs it again.
func (p *GatewayProc) Kill() {
	p.t.Helper()
	if err := p.Cmd.Process.Kill(); err != nil {
		p.t.Fatal(err)
	}
	<-p.Exited
}

// Start runs a gateway that was killed again, with the same environment
// and arguments, and waits until its /healthz answers 200.
func (p *GatewayProc) Start(within time.Duration) {
	p.t.Helper()
	p.StartUnready()
	p.WaitHealthy(within)
}

// StartUnready runs a gateway that was killed again, as Start does, but
// waits only until it listens, not until its /healthz answers 200: for a
// test that watches it become ready.
func (p *GatewayProc) StartUnready() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// Pause stops the gateway's process (SIGSTOP), as a machine that stalls
// would: its sockets stay open, and nothing answers. Resume goes on.
func (p *GatewayProc) Pause() {
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Errorf("SIGSTOP: %v", err)
		return
	}
	// The signal is delivered after kill returns: until the process is
	// seen stopped (state T), it may still answer.
	stat := fmt.Sprintf("/proc/%d/stat", p.Cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		// The state follows the command's name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
	}
	p.t.Errorf("the gateway's process was not seen stopped 5 s after SIGSTOP")
}

// Resume lets a paused gateway go on (SIGCONT).
func (p *GatewayProc) Resume() {
	if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		p.t.Errorf("SIGCONT: %v", err)
	}
}

// WaitHealthy waits until the gateway's /healthz answers 200 (a node of a
// cluster once the cluster's JetStream has formed and the history stream
// is open), failing the test when the gateway exits meanwhile.
func (p *GatewayProc) WaitHealthy(within time.Duration) {
	p.t.Helper()
	Eventually(p.t, within, "the gateway's /healthz", func() bool {
		select {
		case <-p.Exited:
			p.t.Fatalf("mcpp-gateway exited before it was healthy:\n%s", p.Stderr)
		default:
		}
		status, _, err := HTTPGet(p.GW.URL + "/healthz")
		return err == nil && status == http.StatusOK
	})
}

// WriteFile writes content to a new file in a test directory.
func WriteFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}
