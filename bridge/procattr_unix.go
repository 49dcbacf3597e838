//go:build unix

package bridge

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the server in a process group of its own, so
// that the Ctrl-C a terminal sends to the bridge's group does not reach
// it: the bridge stops it itself, after answering the requests in
// flight (closing its standard input, then SIGTERM).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
