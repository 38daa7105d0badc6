package workshop

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"paytwice/pay"
)

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"http://192.168.1.23:8000", "http://192.168.1.23:8000/v1/payments", ""},
		{"  http://192.168.1.23:8000/  ", "http://192.168.1.23:8000/v1/payments", ""},
		{"https://Laptop.local/pay", "https://laptop.local/pay", ""},
		{"http://[fd00::1]:8000/v1/payments?x=1", "http://[fd00::1]:8000/v1/payments?x=1", ""},
		{"", "", "Give your endpoint's address"},
		{"192.168.1.23:8000", "", "Start the address with http://"},
		{"ftp://192.168.1.23/", "", "not ftp://"},
		{"http://", "", "names no computer"},
		{"http://u:p@192.168.1.23/", "", "password"},
		{"http://192.168.1.23:0/", "", "port"},
		{"http://192.168.1.23:65536/", "", "port"},
		{"http://192.168.1.23:/", "", "no port"},
		{"http://192.168.1.23/#x", "", "#part"},
		{"http://192.168.1.23/ x", "", "no spaces"},
		{"http://" + strings.Repeat("a", 400), "", "characters long"},
	} {
		t.Run(c.in, func(t *testing.T) {
			u, err := ParseEndpoint(c.in)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err == "" && u.String() != c.want:
				t.Fatalf("got %s, want %s", u, c.want)
			case c.err != "" && (err == nil || !strings.Contains(pay.ErrorMessage(err), c.err)):
				t.Fatalf("got %v, %v; want a refusal saying %q", u, err, c.err)
			}
		})
	}
}

// FuzzParseEndpoint: whatever a student types, the parser either refuses
// it with a sentence (a 4xx code, never a panic) or gives an http(s) URL
// with a host and a path, short enough for the board, that parses again
// to itself.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"http://192.168.1.23:8000", "https://a.b/v1/payments", "http://[::1]:80/", "http://x:99999",
		"http://u@h/", "javascript:alert(1)", "http://h/%zz", "http://h/\x00", "http://h:8000/v1/payments#f", "http://[fe80::1%25eth0]:80/",
		"HTTP://EXAMPLE.com", "http://h/ä", "http:/h", "http://:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		u, err := ParseEndpoint(in)
		if err != nil {
			if code := pay.ErrorCode(err); code != pay.EINVALID {
				t.Fatalf("%q: refused with %s, want %s", in, code, pay.EINVALID)
			}
			if msg := pay.ErrorMessage(err); !utf8.ValidString(msg) || !strings.HasSuffix(msg, ".") {
				t.Fatalf("%q: the refusal is not a sentence: %q", in, msg)
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.Path == "" || len(u.String()) > 3*maxURLLen {
			t.Fatalf("%q: accepted as %q", in, u)
		}
		again, err := ParseEndpoint(u.String())
		if err != nil || again.String() != u.String() {
			t.Fatalf("%q → %q → %v, %v: not stable", in, u, again, err)
		}
	})
}

func TestGuard(t *testing.T) {
	machine := localAddrs()
	var lan netip.Addr // one address of this machine that is not loopback
	for _, ip := range machine {
		if !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			lan = ip
			break
		}
	}
	allowed := append(Nets(netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("127.0.0.2/32")),
		Allow{Net: netip.MustParsePrefix("192.168.1.10/32"), Port: 9000})
	if lan.IsValid() {
		allowed = append(allowed, Nets(netip.PrefixFrom(lan, lan.BitLen()))...)
	}
	g := NewGuard(allowed, netip.MustParseAddrPort("192.168.1.10:8080"))
	cases := []struct {
		addr string
		ok   bool
	}{
		{"192.168.1.23:8000", true},
		{"127.0.0.2:8000", true},
		{"192.168.1.10:8000", false}, // the server's machine, another program
		{"192.168.1.10:8080", false}, // the server itself
		{"192.168.1.10:9000", true},  // listed exactly by the presenter
		{"127.0.0.1:8000", false},    // the server's loopback
		{"[::1]:8000", false},
		{"[::ffff:127.0.0.1]:8000", false},
		{"169.254.169.254:80", false},
		{"[fd00:ec2::254]:80", false},
		{"[fe80::1]:80", false},
		{"10.0.0.1:80", false},
		{"0.0.0.0:8000", false},
		{"224.0.0.1:8000", false},
		{"127.0.0.3:8000", false},
	}
	if lan.IsValid() {
		// This machine's own interface address, though its network is
		// allowed, at any port.
		cases = append(cases, struct {
			addr string
			ok   bool
		}{netip.AddrPortFrom(lan, 8000).String(), false})
	}
	for _, c := range cases {
		err := g.Check(netip.MustParseAddrPort(c.addr))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed %v", c.addr, err, c.ok)
		}
		if err != nil && pay.ErrorCode(err) != pay.EFORBIDDEN {
			t.Errorf("%s: refused with %s", c.addr, pay.ErrorCode(err))
		}
	}
}

func TestParseAllowed(t *testing.T) {
	got, err := ParseAllowed("192.168.1.0/24, 10.0.5.7, 192.168.1.10:8000, [fd00::5]:81")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, a := range got {
		s = append(s, a.String())
	}
	if strings.Join(s, " ") != "192.168.1.0/24 10.0.5.7/32 192.168.1.10:8000 [fd00::5]:81" {
		t.Fatalf("%v", s)
	}
	if _, err := ParseAllowed("laptop:80"); err == nil {
		t.Fatal("a name was taken for an address")
	}
}

// TestDefaultAllowed: by default the room calls the network of the
// interface it is served on only, never a container bridge's or a VPN's.
func TestDefaultAllowed(t *testing.T) {
	p := netip.MustParsePrefix
	ifaces := []iface{
		{"docker0", []netip.Prefix{p("172.17.0.1/16")}},
		{"br-5e1", []netip.Prefix{p("172.18.0.1/16")}},
		{"tailscale0", []netip.Prefix{p("100.101.1.2/32")}},
		{"tun0", []netip.Prefix{p("10.8.0.2/24")}},
		{"wlan0", []netip.Prefix{p("192.168.1.10/24"), p("fe80::1/64")}},
		{"eth1", []netip.Prefix{p("10.0.5.2/24")}},
	}
	str := func(a []Allow) string {
		var s []string
		for _, x := range a {
			s = append(s, x.String())
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		listen, route, want string
	}{
		{"0.0.0.0", "wlan0", "192.168.1.0/24"},
		{"0.0.0.0", "eth1", "10.0.5.0/24"},
		{"0.0.0.0", "docker0", "192.168.1.0/24"}, // a bridge is never the room
		{"0.0.0.0", "", "192.168.1.0/24"},
		{"::", "tun0", "192.168.1.0/24"},
		{"10.0.5.2", "wlan0", "10.0.5.0/24"},
		{"172.17.0.1", "wlan0", "172.17.0.0/16"}, // served on the bridge itself: its network
		{"127.0.0.1", "wlan0", ""},
	} {
		if got := str(defaultAllowed(netip.MustParseAddr(c.listen), ifaces, c.route)); got != c.want {
			t.Errorf("listening on %s, route by %q: %q, want %q", c.listen, c.route, got, c.want)
		}
	}
}
