package workshop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"paytwice/pay"
)

// Guard decides which addresses the room may call for a student. An
// address is called only when an allowed network holds it and it is none
// of the forbidden ones: this server itself (its own address and port,
// and its loopback address), link-local addresses (169.254.169.254, a
// cloud's metadata service, among them), unspecified, multicast and
// broadcast addresses. The check is made on the address being dialled,
// after any name was resolved, so a name that resolves elsewhere later
// is caught too.
type Guard struct {
	mu      sync.Mutex
	allowed []netip.Prefix
	// self are this server's addresses; selfPort its port (0 unknown):
	// the server's own loopback address is never called, its other
	// addresses never at its port.
	self     []netip.Addr
	selfPort uint16
}

// metadata are the addresses clouds serve instance metadata and secrets
// at, beyond the link-local range every one of them is forbidden with.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// NewGuard allows the networks given; listen is the server's own address
// (its IP may be unspecified, then every address of this machine is its
// own).
func NewGuard(allowed []netip.Prefix, listen netip.AddrPort) *Guard {
	g := &Guard{allowed: append([]netip.Prefix(nil), allowed...), selfPort: listen.Port()}
	g.self = append(g.self, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	if ip := listen.Addr().Unmap(); ip.IsValid() && !ip.IsUnspecified() {
		g.self = append(g.self, ip)
	}
	g.self = append(g.self, localAddrs()...)
	return g
}

// DefaultAllowed is the private network the room is served on: the
// private networks of this machine's interfaces holding listen's
// address, or all of them when it listens on every interface.
func DefaultAllowed(listen netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		ones, _ := n.Mask.Size()
		if !ip.IsPrivate() || (listen.IsValid() && !listen.IsUnspecified() && listen.Unmap() != ip) {
			continue
		}
		out = append(out, netip.PrefixFrom(ip, ones).Masked())
	}
	return out
}

// ParseAllowed reads a comma-separated list of networks (10.0.0.0/8) and
// addresses (192.168.1.23), as the presenter gives them.
func ParseAllowed(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a network (192.168.1.0/24) nor an address", part)
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return out, nil
}

func localAddrs() []netip.Addr {
	var out []netip.Addr
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.IsLoopback() {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// Allowed returns the networks the room may call.
func (g *Guard) Allowed() []netip.Prefix {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]netip.Prefix(nil), g.allowed...)
}

// SetAllowed replaces the networks the room may call (the presenter's).
func (g *Guard) SetAllowed(p []netip.Prefix) {
	g.mu.Lock()
	g.allowed = append([]netip.Prefix(nil), p...)
	g.mu.Unlock()
}

// NoteSelf adds an address this server was reached at, and its port
// when the guard knew none: a server told no listening address learns
// it from its requests.
func (g *Guard) NoteSelf(ap netip.AddrPort) {
	if !ap.IsValid() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.selfPort == 0 {
		g.selfPort = ap.Port()
	}
	ip := ap.Addr().Unmap()
	for _, s := range g.self {
		if s == ip {
			return
		}
	}
	if len(g.self) < 64 {
		g.self = append(g.self, ip)
	}
}

// Check says why the room may not call ap, nil when it may.
func (g *Guard) Check(ap netip.AddrPort) error {
	ip := ap.Addr().Unmap()
	for _, m := range metadata {
		if ip == m {
			return pay.Errorf(pay.EFORBIDDEN, "The room never calls %s: it is where a cloud keeps its machines' secrets.", ip)
		}
	}
	switch {
	case ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return pay.Errorf(pay.EFORBIDDEN, "%s is not one computer's address: give the address of the computer your endpoint runs on.", ip)
	case ip.IsLinkLocalUnicast():
		return pay.Errorf(pay.EFORBIDDEN, "The room never calls link-local addresses such as %s: give your computer's address on the room's network.", ip)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.self {
		if ip != s {
			continue
		}
		if ip.IsLoopback() || ap.Port() == g.selfPort {
			return pay.Errorf(pay.EFORBIDDEN, "%s is this server itself, not your endpoint: give the address of your own computer on the room's network.", ap)
		}
	}
	if ip.IsLoopback() && !g.allows(ip) {
		return pay.Errorf(pay.EFORBIDDEN, "%s is the room's own computer (loopback), not yours: give your computer's address on the room's network.", ip)
	}
	if !g.allows(ip) {
		return pay.Errorf(pay.EFORBIDDEN, "The room calls only the networks the presenter allows (%s); %s is outside them.", g.allowedText(), ip)
	}
	return nil
}

func (g *Guard) allows(ip netip.Addr) bool {
	for _, p := range g.allowed {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func (g *Guard) allowedText() string {
	if len(g.allowed) == 0 {
		return "none yet"
	}
	parts := make([]string, 0, len(g.allowed))
	for _, p := range g.allowed {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, ", ")
}

// CheckHost resolves host (a name or an address) and checks every
// address it has at port: a name with one forbidden address is refused,
// since the room could not choose which one a connection gets.
func (g *Guard) CheckHost(ctx context.Context, host string, port uint16) error {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return g.Check(netip.AddrPortFrom(ip, port))
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return pay.Errorf(pay.EINVALID, "The room cannot find the computer named %q: give its address, such as http://192.168.1.23:8000.", printable(host, 60))
	}
	for _, ip := range ips {
		if err := g.Check(netip.AddrPortFrom(ip, port)); err != nil {
			return err
		}
	}
	return nil
}

// DialContext connects to addr only when the guard allows the address
// actually dialled.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return pay.Errorf(pay.EFORBIDDEN, "The room cannot tell which address %q is.", address)
		}
		if err := g.Check(ap); err != nil {
			// The sentence alone: the checker quotes it to the student.
			return errors.New(pay.ErrorMessage(err))
		}
		return nil
	}}
	return d.DialContext(ctx, network, addr)
}
