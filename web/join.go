package web

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"rsc.io/qr"

	"paytwice/pay"
	"paytwice/views"
)

// Joining: the board and the /join handout tell students where to point
// their phones. They only ever show addresses the server listens on: the
// listener's own address, or, when it listens on every interface, this
// machine's network addresses. A server that listens on loopback only
// cannot be reached from a phone, and the board says so instead of
// showing an address that would not open.
//
// The QR code is drawn here with rsc.io/qr: a tagged release with no
// dependencies of its own, small enough to read, with a stable API
// (Encode, then PNG with the standard four-module quiet zone).

// joinHandlers serve the handout and its QR code, and tell the live pages
// where students join. They hold only the listener's address and the
// command that started the server.
type joinHandlers struct {
	// listenAddr is Config.ListenAddr when it is a TCP address, nil when
	// unset (tests move it to show a room's address).
	listenAddr atomic.Pointer[net.TCPAddr]
	// command is what was run to start this server (Config.Command).
	command string
}

// newJoinHandlers starts from the server's settings.
func newJoinHandlers(cfg Config) *joinHandlers {
	h := &joinHandlers{command: cfg.Command}
	if a, ok := cfg.ListenAddr.(*net.TCPAddr); ok {
		h.listenAddr.Store(a)
	}
	return h
}

// listening is the listener's address; when Config.ListenAddr was unset,
// the local address of the connection r arrived on stands in for it.
func (h *joinHandlers) listening(r *http.Request) *net.TCPAddr {
	if a := h.listenAddr.Load(); a != nil {
		return a
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		return a
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
}

// joinView is where students join, for the page r asked for.
func (h *joinHandlers) joinView(r *http.Request) views.Join {
	var ifaces []net.IP
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ifaces = append(ifaces, ipn.IP)
			}
		}
	}
	j := joinAddresses(h.listening(r), r.Host, r.TLS != nil, ifaces)
	j.Command = h.command
	return j
}

// joinAddresses works out the join addresses from the listener's address
// ln, the Host the page was asked for, and the machine's interface
// addresses.
func joinAddresses(ln *net.TCPAddr, host string, tls bool, ifaces []net.IP) views.Join {
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	port := strconv.Itoa(ln.Port)
	url := func(h string) string { return scheme + net.JoinHostPort(h, port) }
	j := views.Join{Listen: ln.String(), QR: "/join/qr.png"}
	switch {
	case ln.IP.IsLoopback():
		// Only this machine can open it: say so, and show the one address
		// that does work here.
		j.Local = url(ln.IP.String())
		return j
	case !ln.IP.IsUnspecified():
		j.URLs = []string{url(ln.IP.String())}
		return j
	}
	// Every interface: the machine's own network addresses, IPv4 first
	// (what people type), never loopback or link-local. A name the
	// presenter opened the board by (laptop.local) reached this listener,
	// so it goes first.
	if h, _, err := net.SplitHostPort(host); err == nil && net.ParseIP(strings.Trim(h, "[]")) == nil && !isLoopbackHost(h) && h != "" {
		j.URLs = append(j.URLs, url(h))
	}
	v6 := ln.IP.To4() == nil // "[::]" accepts IPv4 and IPv6; "0.0.0.0" IPv4 only
	var six []string
	for _, ip := range ifaces {
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			continue
		}
		if ip.To4() != nil {
			j.URLs = append(j.URLs, url(ip.String()))
		} else if v6 {
			six = append(six, url(ip.String()))
		}
	}
	j.URLs = append(j.URLs, six...)
	if len(j.URLs) == 0 {
		// No network at all: only this machine can open it.
		j.Local = url("127.0.0.1")
	}
	return j
}

// routes registers the handout page and its QR code.
func (h *joinHandlers) routes(e *echo.Echo) {
	e.GET("/join", h.handleJoin)
	e.GET("/join/qr.png", h.handleJoinQR)
}

// handleJoin is GET /join: a page to project or print, with the join
// address in large type and as a QR code.
func (h *joinHandlers) handleJoin(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.JoinPage(h.joinView(c.Request())))
}

// handleJoinQR is GET /join/qr.png: the first join address as a QR code.
// A server nobody else can reach has no code to offer: a phone pointed at
// it would open nothing.
func (h *joinHandlers) handleJoinQR(c echo.Context) error {
	j := h.joinView(c.Request())
	if len(j.URLs) == 0 {
		return pay.Errorf(pay.ENOTFOUND, "This server listens on %s, which only this machine can reach, so there is no address to put in a QR code. Start it with -addr :8080 to let a room join.", j.Listen)
	}
	png, err := qrPNG(j.URLs[0])
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "image/png", png)
}

// qrPNG draws text as a QR code, 8 pixels a module, with medium error
// correction (a projector's glare or a smudged handout still scans).
func qrPNG(text string) ([]byte, error) {
	code, err := qr.Encode(text, qr.M)
	if err != nil {
		return nil, pay.Errorf(pay.EINTERNAL, "drawing the QR code: %v", err)
	}
	code.Scale = 8
	return code.PNG(), nil
}
