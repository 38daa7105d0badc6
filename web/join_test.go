package web

import (
	"bytes"
	"image/png"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/makiuchi-d/gozxing"
	"github.com/makiuchi-d/gozxing/qrcode"
)

func TestJoinAddresses(t *testing.T) {
	t.Parallel()
	ifaces := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.7"), net.ParseIP("fe80::1"), net.ParseIP("2001:db8::1"), net.ParseIP("::1")}
	tcp := func(s string) *net.TCPAddr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tc := range []struct {
		name, listen, host string
		ifaces             []net.IP
		urls               []string
		local              string
	}{
		{name: "loopback only offers no address to students", listen: "127.0.0.1:8080", host: "192.0.2.7:8080", ifaces: ifaces,
			local: "http://127.0.0.1:8080"},
		{name: "IPv6 loopback too", listen: "[::1]:8080", host: "localhost:8080", ifaces: ifaces, local: "http://[::1]:8080"},
		{name: "one interface: that address and no other", listen: "192.0.2.7:9000", host: "localhost:9000", ifaces: ifaces,
			urls: []string{"http://192.0.2.7:9000"}},
		{name: "every IPv4 interface: the machine's addresses, not loopback or link-local", listen: "0.0.0.0:8080", host: "localhost:8080", ifaces: ifaces,
			urls: []string{"http://192.0.2.7:8080"}},
		{name: "every interface: IPv4 first, then IPv6", listen: "[::]:8080", host: "127.0.0.1:8080", ifaces: ifaces,
			urls: []string{"http://192.0.2.7:8080", "http://[2001:db8::1]:8080"}},
		{name: "a name the board was opened by comes first", listen: "[::]:8080", host: "laptop.local:8080", ifaces: ifaces[:2],
			urls: []string{"http://laptop.local:8080", "http://192.0.2.7:8080"}},
		{name: "an address in Host that is no interface of ours is not shown", listen: "0.0.0.0:8080", host: "203.0.113.9:8080", ifaces: ifaces[:2],
			urls: []string{"http://192.0.2.7:8080"}},
		{name: "the port is the listener's, not the one in Host", listen: "0.0.0.0:8080", host: "laptop.local:443", ifaces: ifaces[:2],
			urls: []string{"http://laptop.local:8080", "http://192.0.2.7:8080"}},
		{name: "every interface but no network: this machine only", listen: "0.0.0.0:8080", host: "localhost:8080", ifaces: ifaces[:1],
			local: "http://127.0.0.1:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := joinAddresses(tcp(tc.listen), tc.host, false, tc.ifaces)
			if !reflect.DeepEqual(j.URLs, tc.urls) || j.Local != tc.local {
				t.Errorf("got %q, local %q; want %q, local %q", j.URLs, j.Local, tc.urls, tc.local)
			}
		})
	}
}

// decodeQR reads a QR code from a PNG.
func decodeQR(t *testing.T, b []byte) string {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the QR code is not a PNG: %v", err)
	}
	bmp, err := gozxing.NewBinaryBitmapFromImage(img)
	if err != nil {
		t.Fatal(err)
	}
	res, err := qrcode.NewQRCodeReader().Decode(bmp, nil)
	if err != nil {
		t.Fatalf("decoding the QR code: %v", err)
	}
	return res.GetText()
}

func TestJoinOverHTTP(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	html := func(path string) string {
		t.Helper()
		r := env.get(path, "Accept", "text/html")
		if r.Status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, r.Status)
		}
		return string(r.Body)
	}
	t.Run("on loopback the board says students cannot reach it, and how to start it for a room", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(env.URL, "http://"))
		for _, path := range []string{"/board", "/join"} {
			page := html(path)
			if !strings.Contains(page, "Students cannot reach this server") || !strings.Contains(page, "paytwice -addr :"+port) {
				t.Errorf("%s does not explain that it is unreachable", path)
			}
			if strings.Contains(page, `class="join-url"`) || strings.Contains(page, "/join/qr.png") {
				t.Errorf("%s advertises an address although it listens on loopback only", path)
			}
		}
		if r := env.get("/join/qr.png"); r.Status != http.StatusNotFound {
			t.Errorf("QR code on loopback: %d, want 404", r.Status)
		}
	})
	t.Run("behind paytwice cluster's front door the advice is to start the cluster again", func(t *testing.T) {
		door := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8090}
		cluster := newTestEnv(t, Config{ListenAddr: door, Command: "paytwice cluster"})
		r := cluster.get("/board", "Accept", "text/html")
		if page := string(r.Body); !strings.Contains(page, "paytwice cluster -addr :8090") || !strings.Contains(page, "http://127.0.0.1:8090") {
			t.Errorf("the board does not advise restarting the cluster on the front door's port")
		}
	})
	t.Run("listening on an address, the board shows it and its QR code decodes to it", func(t *testing.T) {
		env.Server.pages.join.listenAddr.Store(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080})
		defer env.Server.pages.join.listenAddr.Store(nil)
		const want = "http://192.0.2.7:8080"
		for _, path := range []string{"/board", "/join"} {
			page := html(path)
			if !strings.Contains(page, `<p class="join-url"><a href="`+want+`">`) || !strings.Contains(page, `src="/join/qr.png"`) {
				t.Errorf("%s does not show %s and its code", path, want)
			}
			if strings.Contains(page, "127.0.0.1") {
				t.Errorf("%s shows the loopback address", path)
			}
		}
		r := env.get("/join/qr.png")
		if r.Status != http.StatusOK || r.Header.Get("Content-Type") != "image/png" {
			t.Fatalf("QR code: %d %s", r.Status, r.Header.Get("Content-Type"))
		}
		if got := decodeQR(t, r.Body); got != want {
			t.Errorf("the QR code says %q, want %q", got, want)
		}
	})
}
