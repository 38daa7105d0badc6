//go:build !linux

package web

import "errors"

func pinProcess(cpus ...int) (func(), error) {
	return nil, errors.New("keeping processes on processors of their own is done on Linux only")
}

func canPin() bool { return false }
