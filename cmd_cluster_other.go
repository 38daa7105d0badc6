//go:build !linux

package main

import "syscall"

// serverProcAttr is nil where there is no parent-death signal: a server
// outlives a cluster process that was killed with SIGKILL.
func serverProcAttr() *syscall.SysProcAttr { return nil }
