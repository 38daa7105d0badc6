package workshop

import (
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"paytwice/pay"
)

// Bounds of what a student registers.
const (
	maxURLLen = 300
	// DefaultPath is the endpoint's path when a student gives only an
	// address (http://192.168.1.23:8000).
	DefaultPath = "/v1/payments"
)

// ParseEndpoint reads the URL a student gives for their endpoint: http or
// https, a host and perhaps a port, a path (DefaultPath when there is
// none); no user name or password, no fragment. Whether the address may
// be called is the Guard's to say. Every refusal is a sentence a student
// can act on.
func ParseEndpoint(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return nil, pay.Errorf(pay.EINVALID, "Give your endpoint's address, such as http://192.168.1.23:8000/v1/payments.")
	case len(raw) > maxURLLen:
		return nil, pay.Errorf(pay.EINVALID, "That address is %d characters long; an endpoint's address fits in %d.", len(raw), maxURLLen)
	case !utf8.ValidString(raw) || strings.ContainsFunc(raw, func(r rune) bool { return r < 0x21 || r == 0x7f }):
		return nil, pay.Errorf(pay.EINVALID, "An address has no spaces or control characters in it.")
	}
	if !strings.Contains(raw, "://") {
		return nil, pay.Errorf(pay.EINVALID, "Start the address with http://, such as http://%s.", printable(raw, 60))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, pay.Errorf(pay.EINVALID, "%q is not an address the room can read: write it like http://192.168.1.23:8000/v1/payments.", printable(raw, 60))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, pay.Errorf(pay.EINVALID, "The room calls endpoints over http:// or https://, not %s://.", printable(u.Scheme, 20))
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, pay.Errorf(pay.EINVALID, "The address names no computer: write it like http://192.168.1.23:8000/v1/payments.")
	case u.User != nil:
		return nil, pay.Errorf(pay.EINVALID, "Leave the user name and password out of the address: the room sends none.")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, pay.Errorf(pay.EINVALID, "Leave the #part out of the address: it never reaches a server.")
	}
	if p := u.Port(); p != "" {
		if n, ok := portNumber(p); !ok || n == 0 {
			return nil, pay.Errorf(pay.EINVALID, "The port must be a number from 1 to 65535, not %s.", printable(p, 12))
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, pay.Errorf(pay.EINVALID, "The address ends its computer's name with a colon but gives no port.")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path, u.RawPath = DefaultPath, ""
	}
	u.Host = strings.ToLower(u.Host)
	return u, nil
}

func portNumber(p string) (int, bool) {
	if len(p) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= 65535
}

// studentName is what a student may be called on the board: short and
// plain, so that nobody writes a sentence across the projector.
var studentName = regexp.MustCompile(`^[\p{L}\p{N}][\p{L}\p{N} _.'-]{0,23}$`)

// ParseName reads the name a student is shown by.
func ParseName(raw string) (string, error) {
	name := strings.Join(strings.Fields(raw), " ")
	if name == "" {
		return "", pay.Errorf(pay.EINVALID, "Give yourself a name for the scoreboard (a nickname will do).")
	}
	if !studentName.MatchString(name) {
		return "", pay.Errorf(pay.EINVALID, "A name on the scoreboard is 1 to 24 letters, digits, spaces, '.', '_', ''' or '-', starting with a letter or a digit.")
	}
	return name, nil
}

// printable is s cut to n runes, its invisible characters replaced, for
// quoting back in a sentence.
func printable(s string, n int) string {
	var b strings.Builder
	for i, r := range s {
		if i >= n*4 || utf8.RuneCountInString(b.String()) >= n {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}
