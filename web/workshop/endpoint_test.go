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
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("127.0.0.2/32")},
		netip.MustParseAddrPort("192.168.1.10:8080"))
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"192.168.1.23:8000", true},
		{"127.0.0.2:8000", true},
		{"192.168.1.10:8000", true},  // the server's machine, another program
		{"192.168.1.10:8080", false}, // the server itself
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
	} {
		err := g.Check(netip.MustParseAddrPort(c.addr))
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed %v", c.addr, err, c.ok)
		}
		if err != nil && pay.ErrorCode(err) != pay.EFORBIDDEN {
			t.Errorf("%s: refused with %s", c.addr, pay.ErrorCode(err))
		}
	}
}
