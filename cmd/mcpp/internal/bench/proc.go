package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is a process bench started: the gateway, the relay or nats-server.
type server struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port
	ws   string // ws:// URL of its WebSocket endpoint
}

// freePort picks a loopback port that is free now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// gatewayBinary finds mcpp-gateway: the flag, next to this executable, or
// on PATH.
func gatewayBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "mcpp-gateway")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("mcpp-gateway"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("mcpp-gateway not found next to mcpp nor on PATH: build both with `go build -o bin/ ./cmd/...` or pass --gateway-bin")
}

// procOptions is what a started process gets besides its arguments.
type procOptions struct {
	env    []string  // added to this process's environment
	stderr io.Writer // nil: this process's stderr
}

// traced is procOptions for a Go server whose collections are read from
// its stderr (gcTracer), the rest of which goes to this process's.
func traced() (procOptions, *gcTracer) {
	t := newGCTracer(os.Stderr)
	godebug := gcTraceEnv
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + gcTraceEnv
	}
	return procOptions{env: []string{"GODEBUG=" + godebug}, stderr: t}, t
}

// startGatewayProcess runs the gateway with limits opened wide, so that the
// run measures the relay and not the rate limiter.
func startGatewayProcess(bin string, extra []string) (*server, error) {
	return startGatewayProcessWith(bin, extra, procOptions{})
}

func startGatewayProcessWith(bin string, extra []string, o procOptions) (*server, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--listen", addr, "--log-level", "warn",
		"--rate", "1e9", "--burst", "1000000000", "--context-rate", "1e9", "--context-burst", "1000000000",
		"--context-create-rate", "1e9", "--context-create-burst", "1000000000",
		"--max-connections", "100000", "--max-participants-per-pod", "100000",
		"--send-queue", "65536", "--ping-interval", "0"}, extra...)
	return startProcessWith("gateway", bin, args, addr, "ws://"+addr+"/ws", o)
}

// startRelayProcess runs this executable's hidden relay command.
func startRelayProcess() (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	return startProcess("relay", self, []string{"_relay", "--listen", addr, "--queue", "65536"}, addr, "ws://"+addr+"/ws")
}

// startNATSProcess runs this executable's hidden nats-server command, its
// WebSocket listener on a free loopback port.
func startNATSProcess() (*server, error) { return startNATSProcessWith(procOptions{}) }

func startNATSProcessWith(o procOptions) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	return startProcessWith("nats", self, []string{"_nats", "--listen", addr}, addr, "ws://"+addr, o)
}

func startProcess(name, bin string, args []string, addr, ws string) (*server, error) {
	return startProcessWith(name, bin, args, addr, ws, procOptions{})
}

func startProcessWith(name, bin string, args []string, addr, ws string, o procOptions) (*server, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if o.stderr != nil {
		cmd.Stderr = o.stderr
	}
	if len(o.env) > 0 {
		cmd.Env = append(os.Environ(), o.env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, addr: addr, ws: ws}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("%s did not listen on %s", name, addr)
}

func (s *server) stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// cpuTime is the process's user plus system CPU time.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks, nil
}

// rss is the process's resident set size in bytes.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// healthy waits for an HTTP answer from the gateway's /healthz.
func healthy(ctx context.Context, addr string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
