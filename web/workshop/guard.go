package workshop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"paytwice/pay"
)

// Guard decides which addresses the room may call for a student. An
// address is called only when an allowed network holds it and it is none
// of the forbidden ones: this machine itself (every address of its
// interfaces, loopback among them, and the addresses the server listens
// and is reached at), at any port, unless the presenter allowed that
// exact address and port; link-local addresses (169.254.169.254, a
// cloud's metadata service, among them), unspecified, multicast and
// broadcast addresses. The check is made on the address being dialled,
// after any name was resolved, so a name that resolves elsewhere later
// is caught too.
type Guard struct {
	mu      sync.Mutex
	allowed []Allow
	// self are this machine's addresses: the room never calls them but at
	// an address and port the presenter allowed exactly.
	self []netip.Addr
}

// Allow is one network or address the room may call, at any port, or
// one address at one port (Port not 0).
type Allow struct {
	Net  netip.Prefix
	Port uint16
}

// String is the entry as the presenter writes it.
func (a Allow) String() string {
	if a.Port != 0 {
		return netip.AddrPortFrom(a.Net.Addr(), a.Port).String()
	}
	return a.Net.String()
}

// allows reports whether a lets the room call ap.
func (a Allow) allows(ap netip.AddrPort) bool {
	return a.Net.Contains(ap.Addr().Unmap()) && (a.Port == 0 || a.Port == ap.Port())
}

// exactly reports whether a names ap itself: one address and its port.
func (a Allow) exactly(ap netip.AddrPort) bool {
	return a.Port == ap.Port() && a.Net.IsSingleIP() && a.Net.Addr() == ap.Addr().Unmap()
}

// Nets allows the networks given, at any port.
func Nets(p ...netip.Prefix) []Allow {
	out := make([]Allow, 0, len(p))
	for _, n := range p {
		out = append(out, Allow{Net: n.Masked()})
	}
	return out
}

// metadata are the addresses clouds serve instance metadata and secrets
// at, beyond the link-local range every one of them is forbidden with.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// NewGuard allows what is given; listen are the addresses the server
// listens and is reached at (an unspecified one adds nothing: every
// address of this machine is its own already).
func NewGuard(allowed []Allow, listen ...netip.AddrPort) *Guard {
	g := &Guard{allowed: append([]Allow(nil), allowed...)}
	g.self = append(g.self, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	for _, ap := range listen {
		if ip := ap.Addr().Unmap(); ip.IsValid() && !ip.IsUnspecified() {
			g.self = append(g.self, ip)
		}
	}
	g.self = append(g.self, localAddrs()...)
	return g
}

// iface is one network interface's name and networks.
type iface struct {
	name string
	nets []netip.Prefix
}

// sideInterfaces are the prefixes of interfaces that are not the room's
// network: container bridges, virtual pairs, VPN tunnels.
var sideInterfaces = []string{"docker", "br-", "veth", "tun", "tailscale", "virbr", "wg", "zt"}

func sideInterface(name string) bool {
	for _, p := range sideInterfaces {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// DefaultAllowed is the private network the room is served on: that of
// the interface holding listen's address or, when the server listens on
// every interface, that of the interface the default route leaves by
// (else the first interface with a private network), never a container
// bridge's or a VPN's, which the presenter lists when wanted.
func DefaultAllowed(listen netip.Addr) []Allow {
	var ifaces []iface
	list, _ := net.Interfaces()
	for _, in := range list {
		if in.Flags&net.FlagUp == 0 || in.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := in.Addrs()
		f := iface{name: in.Name}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					ones, _ := n.Mask.Size()
					f.nets = append(f.nets, netip.PrefixFrom(ip.Unmap(), ones))
				}
			}
		}
		ifaces = append(ifaces, f)
	}
	return defaultAllowed(listen, ifaces, defaultRouteInterface())
}

// defaultAllowed is DefaultAllowed's choice among ifaces, route being the
// name of the interface the default route leaves by ("" unknown).
func defaultAllowed(listen netip.Addr, ifaces []iface, route string) []Allow {
	private := func(f iface) []Allow {
		var out []Allow
		for _, n := range f.nets {
			if n.Addr().IsPrivate() {
				out = append(out, Allow{Net: n.Masked()})
			}
		}
		return out
	}
	if listen.IsValid() && !listen.IsUnspecified() {
		for _, f := range ifaces {
			for _, n := range f.nets {
				if n.Addr() == listen.Unmap() && n.Addr().IsPrivate() {
					return []Allow{{Net: n.Masked()}}
				}
			}
		}
		return nil
	}
	for _, f := range ifaces {
		if f.name == route && !sideInterface(f.name) {
			if out := private(f); len(out) > 0 {
				return out
			}
		}
	}
	for _, f := range ifaces {
		if !sideInterface(f.name) {
			if out := private(f); len(out) > 0 {
				return out
			}
		}
	}
	return nil
}

// defaultRouteInterface names the interface of the IPv4 default route,
// read from Linux's routing table; "" elsewhere or when there is none.
func defaultRouteInterface() string {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// ParseAllowed reads a comma-separated list of networks (10.0.0.0/8),
// addresses (192.168.1.23) and addresses with a port (192.168.1.10:8000,
// [fd00::5]:8000), as the presenter gives them. Only an address with its
// port lets the room call this machine itself.
func ParseAllowed(s string) ([]Allow, error) {
	var out []Allow
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, Allow{Net: p.Masked()})
			continue
		}
		if ap, err := netip.ParseAddrPort(part); err == nil && ap.Port() != 0 {
			ip := ap.Addr().Unmap()
			out = append(out, Allow{Net: netip.PrefixFrom(ip, ip.BitLen()), Port: ap.Port()})
			continue
		}
		ip, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a network (192.168.1.0/24), an address nor an address with its port (192.168.1.10:8000)", printable(part, 60))
		}
		out = append(out, Allow{Net: netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())})
	}
	return out, nil
}

// localAddrs are every address of this machine's interfaces, loopback
// ones among them.
func localAddrs() []netip.Addr {
	var out []netip.Addr
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// Allowed returns the networks the room may call.
func (g *Guard) Allowed() []Allow {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Allow(nil), g.allowed...)
}

// SetAllowed replaces the networks the room may call (the presenter's).
func (g *Guard) SetAllowed(p []Allow) {
	g.mu.Lock()
	g.allowed = append([]Allow(nil), p...)
	g.mu.Unlock()
}

// NoteSelf adds an address this server was reached at: the room never
// calls it.
func (g *Guard) NoteSelf(ap netip.AddrPort) {
	if !ap.IsValid() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
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
	ap = netip.AddrPortFrom(ip, ap.Port())
	for _, s := range g.self {
		if ip == s && !g.exactly(ap) {
			return pay.Errorf(pay.EFORBIDDEN, "%s is this server itself or its own computer, not your endpoint: give the address of your own computer on the room's network.", ap)
		}
	}
	if ip.IsLoopback() && !g.allows(ap) {
		return pay.Errorf(pay.EFORBIDDEN, "%s is the room's own computer (loopback), not yours: give your computer's address on the room's network.", ip)
	}
	if len(g.allowed) == 0 {
		return pay.Errorf(pay.EFORBIDDEN, "The room calls no network yet: ask the presenter to allow the one your computer is on (%s is in none).", ip)
	}
	if !g.allows(ap) {
		return pay.Errorf(pay.EFORBIDDEN, "The room calls only the networks the presenter allows (%s); %s is outside them.", g.allowedText(), ip)
	}
	return nil
}

// exactly reports whether the presenter allowed ap by its address and
// port.
func (g *Guard) exactly(ap netip.AddrPort) bool {
	for _, a := range g.allowed {
		if a.exactly(ap) {
			return true
		}
	}
	return false
}

func (g *Guard) allows(ap netip.AddrPort) bool {
	for _, p := range g.allowed {
		if p.allows(ap) {
			return true
		}
	}
	return false
}

func (g *Guard) allowedText() string {
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
