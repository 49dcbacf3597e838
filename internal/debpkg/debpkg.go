// Package debpkg installs Debian packages that a test needs and the
// machine lacks, so that the README's one test command passes on a fresh
// Debian machine (as root; CI runs as root). Several test binaries may
// install at once (go test runs packages in parallel): apt waits for the
// other's lock instead of failing.
package debpkg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// lockWait is how long apt waits for another apt (another test binary's
// install) to let go of its locks.
const lockWait = "600"

var mu sync.Mutex

// Ensure runs have; when it reports false, it installs packages with
// apt-get (as root) and runs have again. The error says what to install by
// hand when that is not possible.
func Ensure(ctx context.Context, have func() bool, packages ...string) error {
	mu.Lock()
	defer mu.Unlock()
	if have() {
		return nil
	}
	list := strings.Join(packages, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s missing, and only root can install: run `apt-get update && apt-get install -y %s` as root", list, list)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%s missing, and there is no apt-get to install with: install Debian's (or Ubuntu's) packages %s", list, list)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	lock := []string{"-o", "DPkg::Lock::Timeout=" + lockWait}
	for _, args := range [][]string{append(lock, "update"), append(append(lock, "install", "-y", "--no-install-recommends"), packages...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			return fmt.Errorf("apt-get %s failed (%w); install %s by hand:\n%s", strings.Join(args, " "), err, list, out)
		}
	}
	if !have() {
		return errors.New("apt-get installed " + list + ", but the test still does not find what it needs")
	}
	return nil
}
