package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/pay/proxy"
	"paytwice/views"
)

// Bring your own client: every student points a script of their own, in
// any language, at /byo/<name>/ on this server instead of at /. A proxy
// (pay/proxy) in front of this very server injects the article's failures
// into each student's actions, and the scoreboard at /byo shows, live,
// which of the ten rules each student's client kept. The presenter may
// choose the failure every student's next actions get.
type byoc struct {
	proxy         *proxy.Proxy
	books         proxy.Books
	presenterOnly echo.MiddlewareFunc
	isPresenter   func(*http.Request) bool

	mu      sync.Mutex
	names   map[string]string // a student's name → the address that took it
	perAddr map[string]int    // names taken per address
}

// Bounds of the room's proxy: names per address, so that one laptop
// cannot fill the scoreboard, and names in all.
const (
	maxStudentNamesPerAddress = 4
	maxStudentNames           = 200
)

// byocSettle is how long a student's client may stay quiet after a lost
// answer before the scoreboard judges that it will not ask again.
const byocSettle = 10 * time.Second

// studentName is what a path may name a student: short, and safe in a
// URL and on the board.
var studentName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

type byocCtxKey struct{}

// byocClient is who sent a request, as the room's proxy tells clients
// apart: by the student's name in the path.
type byocClient struct{ name, addr string }

// newBYOC makes the room's proxy in front of handler, this very server's,
// with the presenter's checks; the proxy grades by now (nil: the wall
// clock).
func newBYOC(handler func() http.Handler, now func() time.Time, presenterOnly echo.MiddlewareFunc, isPresenter func(*http.Request) bool) *byoc {
	self := &url.URL{Scheme: "http", Host: "paytwice.internal"}
	p, err := proxy.New(proxy.Config{
		Target:    self,
		Transport: handlerTransport{handler},
		Now:       now,
		ClientOf: func(r *http.Request) (string, string, string) {
			c, _ := r.Context().Value(byocCtxKey{}).(byocClient)
			return c.name, c.addr, r.Header.Get("User-Agent")
		},
	})
	if err != nil {
		panic(err) // the URL above is valid
	}
	books := proxy.APIBooks(self, &http.Client{Transport: handlerTransport{handler}, Timeout: 10 * time.Second})
	return &byoc{proxy: p, books: books, presenterOnly: presenterOnly, isPresenter: isPresenter, names: map[string]string{}, perAddr: map[string]int{}}
}

// routes registers the scoreboard, the presenter's choice of the next
// failure, and each student's way through the proxy.
func (b *byoc) routes(e *echo.Echo) {
	e.GET("/byo", b.handlePage)
	e.GET("/byo/-/scores", b.handleScores)
	e.POST("/byo/-/next", b.handleNext, b.presenterOnly)
	e.Any("/byo/:name/*", b.handleForward)
}

// inUse reports whether a student has paid through the room's proxy: the
// board then shows the scoreboard.
func (b *byoc) inUse() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.names) > 0
}

// handleForward is /byo/<name>/...: the student's request, with the
// prefix taken off, through the proxy to this server.
func (b *byoc) handleForward(c echo.Context) error {
	name := c.Param("name")
	if !studentName.MatchString(name) {
		return pay.Errorf(pay.EINVALID, "A student's name in /byo/<name>/ is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or a digit.")
	}
	r := c.Request()
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	if err := b.claim(name, addr); err != nil {
		return err
	}
	out := r.Clone(context.WithValue(r.Context(), byocCtxKey{}, byocClient{name: name, addr: addr}))
	out.URL.Path = "/" + c.Param("*")
	out.URL.RawPath = ""
	b.proxy.ServeHTTP(c.Response(), out)
	return nil
}

// claim gives a name to the address that first uses it, within the
// bounds; another address may not write under a name that is taken.
func (b *byoc) claim(name, addr string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if owner, ok := b.names[name]; ok {
		if owner != addr {
			return pay.Errorf(pay.EFORBIDDEN, "The name %q is taken by another computer in the room: choose another.", name)
		}
		return nil
	}
	switch {
	case len(b.names) >= maxStudentNames:
		return pay.Errorf(pay.EBUSY, "The room's proxy has its %d students already.", maxStudentNames)
	case b.perAddr[addr] >= maxStudentNamesPerAddress:
		return pay.Errorf(pay.EBUSY, "Your computer has %d names already: keep using one of them.", maxStudentNamesPerAddress)
	}
	b.names[name] = addr
	b.perAddr[addr]++
	return nil
}

// handlePage is the scoreboard page: how to point a client at the room,
// each student's grades, and for the presenter the choice of the next
// failure.
func (b *byoc) handlePage(c echo.Context) error {
	return render(c, http.StatusOK, views.BYOCPage(b.scores(c.Request())))
}

// handleScores is the scoreboard alone, which the page fetches every few
// seconds.
func (b *byoc) handleScores(c echo.Context) error {
	return render(c, http.StatusOK, views.BYOCScores(b.scores(c.Request())))
}

// handleNext is the presenter's choice of the failure every student's
// next actions get (fault=..., or fault= for the schedule).
func (b *byoc) handleNext(c echo.Context) error {
	if err := b.proxy.Force(proxy.Fault(c.FormValue("fault"))); err != nil {
		return pay.Errorf(pay.EINVALID, "%s", err.Error())
	}
	if c.Request().Header.Get("HX-Request") == "true" {
		return render(c, http.StatusOK, views.BYOCScores(b.scores(c.Request())))
	}
	return c.Redirect(http.StatusSeeOther, "/byo")
}

func (b *byoc) scores(r *http.Request) views.BYOCView {
	// Rule 10 is read on the books for the actions that are over.
	rep := b.proxy.GradeSettled(r.Context(), b.books, byocSettle)
	v := views.BYOCView{Presenter: b.isPresenter(r), Next: string(b.proxy.Forced()), Host: r.Host}
	for _, f := range append([]proxy.Fault{proxy.None}, proxy.Faults...) {
		v.Faults = append(v.Faults, views.BYOCFault{Name: string(f), Says: f.Describe()})
	}
	for _, r := range proxy.Rules {
		v.Rules = append(v.Rules, views.BYOCRule{Num: int(r.Rule), Asks: r.Asks})
	}
	for _, c := range rep.Clients {
		row := views.BYOCStudent{Name: c.Client, Actions: len(c.Actions)}
		for _, g := range c.Grades {
			row.Verdicts = append(row.Verdicts, string(g.Verdict))
			switch g.Verdict {
			case proxy.Passed:
				row.Passed++
			case proxy.Broken:
				row.Broken++
				if row.FirstBroken == "" {
					row.FirstBroken = g.Detail
				}
			}
		}
		v.Students = append(v.Students, row)
	}
	sort.SliceStable(v.Students, func(i, j int) bool { return v.Students[i].Passed > v.Students[j].Passed })
	return v
}

// handlerTransport sends a request to an http.Handler in this process: the
// room's proxy forwards to the server it runs in without a trip through
// the network stack. A handler that drops the connection (the response
// lost) is a network error, as it is to a real client.
type handlerTransport struct{ handler func() http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	w := &bufferedWriter{header: http.Header{}}
	in := req.Clone(req.Context())
	in.RemoteAddr = "127.0.0.1:0" // the server itself, looking its books up
	if c, ok := req.Context().Value(byocCtxKey{}).(byocClient); ok {
		in.RemoteAddr = net.JoinHostPort(c.addr, "0") // the server's limits count the student's address
	}
	in.RequestURI = req.URL.RequestURI()
	in.Host = req.URL.Host
	func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				w.dropped = true
			}
		}()
		t.handler().ServeHTTP(w, in)
	}()
	if w.dropped {
		return nil, errors.New("the server closed the connection without an answer")
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return &http.Response{StatusCode: w.status, Status: http.StatusText(w.status), Header: w.header, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body: io.NopCloser(bytes.NewReader(w.body.Bytes())), ContentLength: int64(w.body.Len()), Request: req}, nil
}

// bufferedWriter is the ResponseWriter of handlerTransport: it keeps the
// answer, and takes a hijack as a dropped connection.
type bufferedWriter struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	dropped bool
}

func (w *bufferedWriter) Header() http.Header { return w.header }
func (w *bufferedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *bufferedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *bufferedWriter) Flush() {}

// Hijack hands over one end of an in-memory connection whose other end is
// already closed: whatever the handler does with it, no answer comes.
func (w *bufferedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.dropped = true
	a, b := net.Pipe()
	b.Close()
	return a, bufio.NewReadWriter(bufio.NewReader(a), bufio.NewWriter(a)), nil
}
