package main

import "syscall"

// serverProcAttr has Linux send a server SIGTERM when the cluster's
// process dies, even of SIGKILL, so that no server outlives its front
// door and goes on holding its port and database connections.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
