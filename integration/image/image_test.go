// Package image tests the container image: Dockerfile and
// deploy/build-image.sh, built with podman (Debian's, installed when
// neither podman nor a running docker is here) and started as a user
// starts it.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/internal/debpkg"
)

// The container image (Dockerfile, deploy/build-image.sh), built with
// podman or docker and started as a user would: where this machine can run
// containers, with `ENGINE run`; and, as root, from the image's own
// filesystem (ENGINE create, ENGINE export, tar -x, chroot --userspec to
// the image's user), which works where it cannot (Debian's podman builds
// images on these machines but cannot run them: their control groups are
// in a mode crun refuses).

// imageConfig is what `ENGINE image inspect` says of the image.
type imageConfig struct {
	User         string
	Env          []string
	Entrypoint   []string
	Cmd          []string
	ExposedPorts map[string]struct{}
	Volumes      map[string]struct{}
}

// TestImage builds the image and checks what `docker run IMAGE` gives a
// user: the gateway, as its non-root user, with nothing mounted, answers
// /healthz on all of the container's addresses; its history is on the
// image's volume and survives a restart; without it, in the image's /tmp,
// removed at exit; the user may write nothing else; the image's mcpp
// talks to it.
func TestImage(t *testing.T) {
	t.Parallel()
	engine := containerEngine(t)
	tag := fmt.Sprintf("localhost/mcpp-gateway:test-%d", os.Getpid())
	version := fmt.Sprintf("test-%d", os.Getpid())
	start := time.Now()
	buildImage(t, engine, tag, version)
	t.Logf("deploy/build-image.sh built %s with %s in %v", tag, engine, time.Since(start).Round(time.Second))

	cfg := inspectImage(t, engine, tag)
	if cfg.User != fmt.Sprintf("%d:%d", harness.ImageUser, harness.ImageUser) {
		t.Errorf("the image's user is %q, want %d:%d (numeric, not root)", cfg.User, harness.ImageUser, harness.ImageUser)
	}
	for _, kv := range harness.ImageEnv {
		if !slices.Contains(cfg.Env, kv) {
			t.Errorf("the image's environment %v lacks %s", cfg.Env, kv)
		}
	}
	if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("the image exposes %v, not 8080/tcp", cfg.ExposedPorts)
	}
	if _, ok := cfg.Volumes["/data"]; !ok || len(cfg.Volumes) != 1 {
		t.Errorf("the image's volumes are %v, want /data (--history-dir)", cfg.Volumes)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/mcpp-gateway"}) || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %v, cmd %v: want mcpp-gateway, flags after the image's name", cfg.Entrypoint, cfg.Cmd)
	}

	if err := runContainer(t, engine, tag); err != nil {
		if os.Geteuid() != 0 {
			t.Fatalf("%v\n(and starting the image's own filesystem instead needs root, for chroot)", err)
		}
		t.Logf("this machine cannot run containers (%v): the gateway starts from the image's own filesystem", err)
	}
	if os.Geteuid() != 0 {
		return // the image ran; its filesystem's own checks need chroot
	}
	root := exportImage(t, engine, tag)

	// --version, as the image's user.
	out, err := exec.Command("chroot", append([]string{"--userspec=" + cfg.User, root}, append(cfg.Entrypoint, "--version")...)...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mcpp-gateway "+version+" ") {
		t.Errorf("mcpp-gateway --version in the image: %q %v, want %s (VERSION of build-image.sh)", out, err, version)
	}

	// Nothing mounted: the history on the image's /data.
	g := startFromRoot(t, root, cfg)
	watcher := g.gw.Dial(t, "image", "watcher", "")
	send := exec.Command("chroot", "--userspec="+cfg.User, root, "/usr/local/bin/mcpp", "send", "--gateway", g.gw.URL,
		"--pod", "image", "--participant", "alice", "--id", "hello", "--kind", "chat", "--payload", `{"text":"hello"}`)
	send.Env = cfg.Env
	if out, err := send.CombinedOutput(); err != nil {
		t.Fatalf("the image's mcpp send: %v\n%s", err, out)
	}
	watcher.ExpectEnvelope("chat", "hello")
	g.stop(t)
	owned(t, filepath.Join(root, "data", "server-name"))
	owned(t, filepath.Join(root, "data", "jetstream"))

	// The volume keeps the history across a restart.
	g = startFromRoot(t, root, cfg)
	carol := g.gw.Dial(t, "image", "carol", "history=all")
	carol.ExpectEnvelope("chat", "hello")
	g.stop(t)

	// MCPP_HISTORY_DIR emptied: the history in a temporary directory of
	// the image's /tmp, removed at exit.
	g = startFromRoot(t, root, cfg, "MCPP_HISTORY_DIR=")
	tmp, _ := filepath.Glob(filepath.Join(root, "tmp", "mcpp-jetstream-*"))
	if len(tmp) != 1 {
		t.Fatalf("the history's temporary directories in the image's /tmp: %v, want one", tmp)
	}
	owned(t, tmp[0])
	g.stop(t)
	if left, _ := os.ReadDir(filepath.Join(root, "tmp")); len(left) != 0 {
		t.Errorf("the gateway left %v in /tmp", left)
	}

	// The user writes nowhere else: a history directory the image does not
	// give it is refused at start.
	cmd := exec.Command("chroot", append([]string{"--userspec=" + cfg.User, root}, cfg.Entrypoint...)...)
	cmd.Env = append(slices.Clone(cfg.Env), "MCPP_HISTORY_DIR=/var/lib/mcpp", fmt.Sprintf("MCPP_LISTEN=127.0.0.1:%d", harness.FreePort(t)))
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "--history-dir") || !strings.Contains(string(out), "permission denied") {
		t.Errorf("a history directory outside /data: %v\n%s\nwant exit 1, --history-dir: permission denied", err, out)
	}
}

// containerEngine is podman, or docker when podman is missing and a docker
// daemon answers (as deploy/build-image.sh chooses); when neither is
// here, Debian's podman is installed (as root), as the viewer tests
// install Chromium.
func containerEngine(t *testing.T) string {
	t.Helper()
	var engine string
	have := func() bool {
		if _, err := exec.LookPath("podman"); err == nil {
			engine = "podman"
			return true
		}
		if _, err := exec.LookPath("docker"); err == nil && exec.Command("docker", "info").Run() == nil {
			engine = "docker"
			return true
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := debpkg.Ensure(ctx, have, "podman"); err != nil {
		t.Fatalf("the image test builds with podman or docker: %v", err)
	}
	return engine
}

// buildImage runs deploy/build-image.sh TAG and removes the image when
// the test ends.
func buildImage(t *testing.T, engine, tag, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../deploy/build-image.sh", tag)
	cmd.Env = append(os.Environ(), "CONTAINER_ENGINE="+engine, "VERSION="+version)
	t.Cleanup(func() { _ = exec.Command(engine, "rmi", "-f", tag).Run() })
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/build-image.sh %s: %v\n%s", tag, err, out)
	}
}

func inspectImage(t *testing.T, engine, tag string) imageConfig {
	t.Helper()
	out, err := exec.Command(engine, "image", "inspect", "--format", "{{json .Config}}", tag).Output()
	if err != nil {
		t.Fatalf("%s image inspect %s: %v", engine, tag, err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatalf("%s image inspect: %v\n%s", engine, err, out)
	}
	return cfg
}

// runContainer runs the image as a user would, its port published on a
// loopback port, and checks that its /healthz answers; it reports why
// when the machine cannot run it.
func runContainer(t *testing.T, engine, tag string) error {
	t.Helper()
	port := harness.FreePort(t)
	name := fmt.Sprintf("mcpp-gateway-test-%d", os.Getpid())
	t.Cleanup(func() { _ = exec.Command(engine, "rm", "-f", "-t", "30", name).Run() })
	out, err := exec.Command(engine, "run", "-d", "--name", name, "-p", fmt.Sprintf("127.0.0.1:%d:8080", port), tag).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s run: %v: %s", engine, err, strings.TrimSpace(string(out)))
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	harness.Eventually(t, 60*time.Second, "the container's /healthz", func() bool {
		status, _, err := harness.HTTPGet(url + "/healthz")
		return err == nil && status == http.StatusOK
	})
	gw := harness.GatewayAt(fmt.Sprintf("127.0.0.1:%d", port))
	a := gw.Dial(t, "run", "a", "")
	b := gw.Dial(t, "run", "b", "")
	a.Send(map[string]any{"id": "hi", "kind": "chat"})
	b.ExpectEnvelope("chat", "hi")
	t.Logf("%s run %s: /healthz 200, a pod relays", engine, tag)
	return nil
}

// exportImage lays the image's filesystem out in a directory (owners and
// modes as the image has them), as a container of it would see it.
func exportImage(t *testing.T, engine, tag string) string {
	t.Helper()
	id, err := exec.Command(engine, "create", tag).Output()
	if err != nil {
		t.Fatalf("%s create %s: %v", engine, tag, err)
	}
	container := strings.TrimSpace(string(id))
	defer func() { _ = exec.Command(engine, "rm", "-f", container).Run() }()
	dir := t.TempDir()
	tarball := filepath.Join(dir, "image.tar")
	if out, err := exec.Command(engine, "export", "-o", tarball, container).CombinedOutput(); err != nil {
		t.Fatalf("%s export: %v\n%s", engine, err, out)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "--numeric-owner", "-xpf", tarball, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	return root
}

// rootGateway is a gateway started from the image's filesystem.
type rootGateway struct {
	cmd    *exec.Cmd
	stderr *harness.SyncBuffer
	exited chan struct{}
	gw     *harness.Gateway
}

// startFromRoot runs the image's entrypoint in root as the image's user
// with the image's environment and env, as `docker run -e` adds to it;
// MCPP_LISTEN keeps the image's 0.0.0.0 (all of the container's
// addresses) on a port of its own, as `-p PORT:8080` would publish it.
func startFromRoot(t *testing.T, root string, cfg imageConfig, env ...string) *rootGateway {
	t.Helper()
	port := harness.FreePort(t)
	g := &rootGateway{stderr: &harness.SyncBuffer{}, exited: make(chan struct{})}
	args := append(append([]string{"--userspec=" + cfg.User, root}, cfg.Entrypoint...), cfg.Cmd...)
	g.cmd = exec.Command("chroot", args...)
	g.cmd.Env = append(append(slices.Clone(cfg.Env), env...), fmt.Sprintf("MCPP_LISTEN=0.0.0.0:%d", port))
	g.cmd.Stdout, g.cmd.Stderr = g.stderr, g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		<-g.exited
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", g.stderr)
		}
	})
	g.gw = harness.GatewayAt(fmt.Sprintf("127.0.0.1:%d", port))
	harness.Eventually(t, 60*time.Second, "/healthz of the gateway started from the image", func() bool {
		select {
		case <-g.exited:
			t.Fatalf("the gateway exited (%v):\n%s", g.cmd.ProcessState, g.stderr)
		default:
		}
		status, _, err := harness.HTTPGet(g.gw.URL + "/healthz")
		return err == nil && status == http.StatusOK
	})
	if status, _, err := harness.HTTPGet(g.gw.URL + "/livez"); err != nil || status != http.StatusOK {
		t.Fatalf("/livez: %d %v", status, err)
	}
	return g
}

// stop ends the gateway with SIGTERM, as `docker stop` does, and checks
// that it drained and exited 0.
func (g *rootGateway) stop(t *testing.T) {
	t.Helper()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not exit within 30 s of SIGTERM:\n%s", g.stderr)
	}
	if code := g.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the gateway exited %d after SIGTERM:\n%s", code, g.stderr)
	}
}

// owned checks that the gateway wrote path as the image's user.
func owned(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the gateway did not write %s: %v", path, err)
	}
	if s, ok := st.Sys().(*syscall.Stat_t); !ok || s.Uid != harness.ImageUser {
		t.Errorf("%s is owned by %v, want the image's user %d", path, st.Sys(), harness.ImageUser)
	}
}
