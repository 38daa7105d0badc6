package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// childShutdownLimit is how long a server may take to stop after SIGTERM
// (its own shutdown gives payments in flight 15 seconds) before it is
// killed.
const childShutdownLimit = 20 * time.Second

// listenFDVariable hands a server a listener its parent opened: the
// number of an inherited file descriptor. The parent keeps the port from
// the moment it chose it, so no other program can take it before the
// server starts.
const listenFDVariable = "PAYTWICE_LISTEN_FD"

// inheritedListener is the listener listenFDVariable names, or nil when
// it names none.
func inheritedListener(getenv func(string) string) (net.Listener, error) {
	v := getenv(listenFDVariable)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s must name an inherited file descriptor (3 or more), not %q", listenFDVariable, v)
	}
	f := os.NewFile(uintptr(fd), "inherited listener")
	defer f.Close() // FileListener holds a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", listenFDVariable, fd, err)
	}
	return ln, nil
}

// child is one server process of the cluster.
type child struct {
	name   string
	url    *url.URL // http://127.0.0.1:port
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	// waitErr says how it ended; read it once exited is closed.
	waitErr error
	// epoch is the epoch of the event ids this server's streams carry,
	// as its last stream's answer said (peers.StreamEpochHeader): the
	// front door sends a page resuming from such an id back here.
	epoch atomic.Pointer[string]
}

// hasExited reports whether the process is gone.
func (c *child) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// startChild runs this binary as the server called name with args and
// the variables env, on a loopback listener opened here. Secrets go in
// env: command lines are visible to every user of the machine.
func startChild(exe, name string, args, env []string, out *lockedLines) (*child, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	f, err := ln.(*net.TCPListener).File()
	// The child holds its own copy. Closing this one matters: were the
	// parent to keep the socket, connections to a dead child would wait in
	// its queue instead of being refused and sent to another server.
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(exe, append([]string{"-name", name}, args...)...)
	cmd.ExtraFiles = []*os.File{f} // descriptor 3
	cmd.SysProcAttr = serverProcAttr()
	cmd.Env = append(append(os.Environ(), env...), listenFDVariable+"=3")
	stdout, stderr := out.prefixed(name, false), out.prefixed(name, true)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting server %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan struct{}),
		url: &url.URL{Scheme: "http", Host: ln.Addr().String()}}
	go func() {
		c.waitErr = cmd.Wait()
		stdout.flush()
		stderr.flush()
		close(c.exited)
	}()
	return c, nil
}

// waitUntilServing asks each server for its key policy and waits for the
// answers. The listeners are open from the start, so a request waits in
// the queue until its server serves: no polling, no retry.
func waitUntilServing(ctx context.Context, children []*child) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	errs := make(chan error, len(children))
	for _, c := range children {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url.JoinPath("/v1/idempotency-policy").String(), nil)
			answered := make(chan error, 1)
			go func() {
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				answered <- err
			}()
			exitedFirst := func() error { // read c.waitErr once c.exited is closed
				return fmt.Errorf("server %s exited before serving (%v); its output above says why", c.name, c.waitErr)
			}
			select {
			case err := <-answered:
				if err != nil {
					// The listener is the server's alone: a connection it
					// dropped means it is exiting, and its exit says more.
					// Interrupted (Ctrl-C), the cluster stops at once.
					select {
					case <-c.exited:
						err = exitedFirst()
					case <-ctx.Done():
						err = fmt.Errorf("server %s did not answer at %s: %w", c.name, c.url, err)
					case <-time.After(5 * time.Second):
						err = fmt.Errorf("server %s did not answer at %s: %w", c.name, c.url, err)
					}
				}
				errs <- err
			case <-c.exited:
				errs <- exitedFirst()
			}
		}()
	}
	var all []error
	for range children {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// stopChildren sends SIGTERM to every server still running and waits for
// each to exit, killing every one still running once limit has passed.
// A server that ends with an error then is reported in the returned
// error; one that had died before was reported when it did.
func stopChildren(children []*child, out *lockedLines, limit time.Duration) error {
	var running []*child
	for _, c := range children {
		if !c.hasExited() {
			running = append(running, c)
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var errs []error
	// One deadline for all of them, closed once passed: every server still
	// running then is killed, not only the first one waited for.
	deadline, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, c := range running {
		select {
		case <-c.exited:
		case <-deadline.Done():
			out.printf(out.stderr, "paytwice cluster: server %s did not stop within %v; killing it\n", c.name, limit)
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if c.waitErr != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", c.name, c.waitErr))
		}
	}
	return errors.Join(errs...)
}
