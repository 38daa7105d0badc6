package web

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"paytwice/pay"
)

// The OpenAPI description is checked twice: as a document, with a
// maintained OpenAPI 3.1 library (pb33f/libopenapi and its validator, which
// read 3.1 and its JSON Schema 2020-12 in full), and against the server:
// every /v1/ answer the API tests receive goes through conformingTransport,
// and TestMain fails the run if any did not match its description.

var (
	openAPIOnce      sync.Once
	openAPIValidator validator.Validator
	openAPIErr       error

	nonConformingMu sync.Mutex
	nonConforming   []string
)

func loadOpenAPI() (validator.Validator, error) {
	openAPIOnce.Do(func() {
		doc, err := libopenapi.NewDocument(openAPIDocument)
		if err != nil {
			openAPIErr = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			openAPIErr = fmt.Errorf("%v", errs)
			return
		}
		openAPIValidator = v
	})
	return openAPIValidator, openAPIErr
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests that wait on real clocks (waitsOnRealClocks) spend their
	// time waiting, not working: ten run side by side whatever the number
	// of cores (the browser tests among them keep to their own three), six
	// under the race detector, which makes each one's work several times
	// heavier. An explicit -parallel wins.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		sideBySide := 10
		if raceDetector {
			sideBySide = 6
		}
		_ = flag.Set("test.parallel", strconv.Itoa(max(sideBySide, runtime.GOMAXPROCS(0))))
	}
	code := m.Run()
	sharedBrowser.Stop()
	nonConformingMu.Lock()
	if len(nonConforming) > 0 {
		fmt.Fprintf(os.Stderr, "%d /v1/ answers did not conform to web/openapi.json:\n", len(nonConforming))
		for _, s := range nonConforming[:min(len(nonConforming), 20)] {
			fmt.Fprintln(os.Stderr, "  "+s)
		}
		code = 1
	}
	nonConformingMu.Unlock()
	os.Exit(code)
}

// describedOperation reports whether the description has an operation for
// the request: other methods on /v1/ paths (a 405) are not part of it.
func describedOperation(r *http.Request) bool {
	if r.Method == http.MethodOptions {
		return strings.HasPrefix(r.URL.Path, "/v1/")
	}
	switch p := r.URL.Path; {
	case p == paymentsPath:
		return r.Method == http.MethodPost || r.Method == http.MethodGet
	case strings.HasPrefix(p, paymentsPath+"/") && !strings.Contains(p[len(paymentsPath)+1:], "/"):
		return r.Method == http.MethodGet && len(p) > len(paymentsPath)+1
	case p == intentsPath:
		return r.Method == http.MethodPost
	case strings.HasPrefix(p, intentsPath+"/"):
		rest := p[len(intentsPath)+1:]
		id, confirm := strings.CutSuffix(rest, "/confirm")
		if confirm {
			return r.Method == http.MethodPost && id != "" && !strings.Contains(id, "/")
		}
		return r.Method == http.MethodGet && rest != "" && !strings.Contains(rest, "/")
	case p == "/v1/idempotency-policy":
		return r.Method == http.MethodGet
	}
	return false
}

// conformingTransport checks every described /v1/ answer against the
// OpenAPI description and records those that do not conform.
type conformingTransport struct{ next http.RoundTripper }

func (t conformingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil || !describedOperation(req) || strings.Contains(res.Header.Get("Content-Type"), "text/html") {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	v, lerr := loadOpenAPI()
	if lerr != nil {
		recordNonConforming(fmt.Sprintf("the description does not load: %v", lerr))
		return res, nil
	}
	check := *res
	check.Body = io.NopCloser(bytes.NewReader(body))
	nonConformingMu.Lock() // the validator is not documented as safe for concurrent use
	ok, verrs := v.ValidateHttpResponse(req, &check)
	nonConformingMu.Unlock()
	if !ok {
		var msgs []string
		for _, e := range verrs {
			msg := e.Message
			for _, se := range e.SchemaValidationErrors {
				msg += "; " + se.Reason + " at " + se.FieldPath
			}
			msgs = append(msgs, msg)
		}
		recordNonConforming(fmt.Sprintf("%s %s → %d %s: %s", req.Method, req.URL.Path, res.StatusCode, pay.Truncate(string(body), 200), strings.Join(msgs, " | ")))
	}
	return res, nil
}

func recordNonConforming(s string) {
	nonConformingMu.Lock()
	nonConforming = append(nonConforming, s)
	nonConformingMu.Unlock()
}

// apiClient is the client the API tests send their requests with.
var apiClient = &http.Client{Transport: conformingTransport{http.DefaultTransport}}

func TestOpenAPIDescriptionIsValid(t *testing.T) {
	t.Parallel()
	v, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s", e.Message, e.Reason)
		}
	}
	doc, _ := libopenapi.NewDocument(openAPIDocument)
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("building the model: %v", err)
	}
	if model.Model.Version != "3.1.0" {
		t.Errorf("version %q", model.Model.Version)
	}

	// Every /v1/ route the server has is described, with each method.
	env := newTestEnv(t, Config{})
	param := regexp.MustCompile(`:(\w+)`)
	for _, r := range env.Server.echo.Routes() {
		if !strings.HasPrefix(r.Path, "/v1/") && r.Path != "/v1" {
			continue
		}
		name := "{charge_id}"
		if strings.HasPrefix(r.Path, intentsPath) {
			name = "{intent_id}"
		}
		path := param.ReplaceAllString(r.Path, name)
		item, ok := model.Model.Paths.PathItems.Get(path)
		if !ok {
			t.Errorf("%s %s is not described", r.Method, path)
			continue
		}
		if item.GetOperations().GetOrZero(strings.ToLower(r.Method)) == nil {
			t.Errorf("%s %s has no operation in the description", r.Method, path)
		}
	}

	// It is served.
	res := env.get("/openapi.json")
	if res.Status != http.StatusOK || !bytes.Equal(res.Body, openAPIDocument) || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %d %s", res.Status, res.Header.Get("Content-Type"))
	}
}
