//go:build !linux

package bench

import "syscall"

// bindNoPort is Linux's (see sourceaddr_linux.go); elsewhere a bound
// source address gets its port at bind.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }

// checkOpenFiles is Linux's; elsewhere the dials say when files run out.
func checkOpenFiles(int) error { return nil }
