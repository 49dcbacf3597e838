package bench

import (
	"fmt"
	"syscall"
)

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT of linux/in.h (Linux
// 4.2), which package syscall does not name.
const ipBindAddressNoPort = 24

// bindNoPort lets a socket bound to a source address get its port at
// connect (see connsPerSource).
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	}); err != nil {
		return err
	}
	return serr
}

// checkOpenFiles says what is wrong when this process may not hold conns
// connections. A server bench starts gets the same limit: Go raises a
// process's soft limit to the hard one, which children inherit.
func checkOpenFiles(conns int) error {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return nil // nothing to say
	}
	if need := uint64(conns + openFilesSpare); r.Cur < need {
		return fmt.Errorf("--pods: %d connections need %d open files in bench, and as many in a server it starts, and the limit is %d: raise it (ulimit -n %d)", conns, need, r.Cur, need)
	}
	return nil
}
