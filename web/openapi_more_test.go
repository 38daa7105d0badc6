package web

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// The validator the tests use must itself refuse what OAS 3.1 refuses, or
// a passing description proves nothing: a license with both identifier
// and url, and a security requirement that names no scheme.
func TestOpenAPIValidatorRefusesWhatOAS31Refuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, from, to string }{
		{"a license with both an identifier and a url", `"license": {"name": "MIT", "identifier": "MIT"}`,
			`"license": {"name": "MIT", "identifier": "MIT", "url": "https://opensource.org/license/mit"}`},
		{"a license without its name", `"license": {"name": "MIT", "identifier": "MIT"}`, `"license": {"identifier": "MIT"}`},
		{"a response without its description", `"Options": {
        "description": "No body; Allow lists the methods the path takes.",`, `"Options": {`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !bytes.Contains(openAPIDocument, []byte(c.from)) {
				t.Fatalf("the description no longer holds %s", c.from)
			}
			broken := bytes.Replace(openAPIDocument, []byte(c.from), []byte(c.to), 1)
			doc, err := libopenapi.NewDocument(broken)
			if err != nil {
				return // refused as it is read
			}
			v, errs := validator.NewValidator(doc)
			if len(errs) > 0 {
				return
			}
			if ok, _ := v.ValidateDocument(); ok {
				t.Fatal("the validator passed it")
			}
		})
	}
}

// Every security requirement names a scheme the description defines, and
// the description defines no scheme it does not use.
func TestOpenAPISecuritySchemesAreDefinedAndUsed(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for name := range m.Model.Components.SecuritySchemes.KeysFromOldest() {
		defined[name] = false
	}
	for _, req := range m.Model.Security {
		for name := range req.Requirements.KeysFromOldest() {
			if _, ok := defined[name]; !ok {
				t.Errorf("the document's security names %q, which is not defined", name)
			}
			defined[name] = true
		}
	}
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for _, req := range op.Security {
				for name := range req.Requirements.KeysFromOldest() {
					if _, ok := defined[name]; !ok {
						t.Errorf("%s %s names the security scheme %q, which is not defined", method, path, name)
					}
					defined[name] = true
				}
			}
			for _, p := range op.Parameters {
				if p.In == "header" && strings.EqualFold(p.Name, "Authorization") {
					t.Errorf("%s %s describes Authorization as a parameter, which OAS ignores: it belongs to a security scheme", method, path)
				}
			}
		}
	}
	for name, used := range defined {
		if !used {
			t.Errorf("the security scheme %q is defined but never used", name)
		}
	}
}

// OPTIONS and a method a path does not take are answered as described:
// 204 and 405, each with an Allow that lists exactly the methods the
// description gives the path.
func TestOptionsAndMethodNotAllowedAreDescribed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		var methods []string
		for method := range item.GetOperations().KeysFromOldest() {
			methods = append(methods, strings.ToUpper(method))
		}
		concrete := strings.NewReplacer("{charge_id}", "ch_x", "{intent_id}", "pi_x").Replace(path)
		req, _ := http.NewRequest(http.MethodOptions, env.URL+concrete, nil)
		r, err := do(req) // through the checking transport: validated against the description
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusNoContent || len(r.Body) != 0 {
			t.Errorf("OPTIONS %s: %d %q", path, r.Status, r.Body)
		}
		allow := strings.Split(r.Header.Get("Allow"), ", ")
		if !sameMethods(allow, methods) {
			t.Errorf("OPTIONS %s: Allow %v, the description %v", path, allow, methods)
		}
		req, _ = http.NewRequest(http.MethodDelete, env.URL+concrete, nil)
		req.Header.Set("Accept", "application/json")
		r, err = do(req)
		if err != nil {
			t.Fatal(err)
		}
		want := "method-not-allowed" // the sandbox answers in Stripe's shape
		if strings.HasPrefix(concrete, intentsPath) {
			want = "method_not_allowed"
		}
		if r.Status != http.StatusMethodNotAllowed || methodRefusal(t, r) != want || r.Header.Get("Stripe-Should-Retry") != "false" ||
			!sameMethods(strings.Split(r.Header.Get("Allow"), ", "), methods) {
			t.Errorf("DELETE %s: %d Allow %q %s", path, r.Status, r.Header.Get("Allow"), r.Body)
		}
	}
}

func sameMethods(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Amounts with a fraction or an exponent, which JSON Schema's integer
// admits, are refused as the description says.
func TestAmountsWrittenAsFloatsAreRefusedAsDescribed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	if !bytes.Contains(openAPIDocument, []byte("100.0 and 1e2, which JSON Schema's integer admits, are refused with a 400")) {
		t.Fatal("the description no longer says how 100.0 and 1e2 are read")
	}
	for i, amount := range []string{"100.0", "1e2", "1E2", "100.5"} {
		r := env.pay("float-"+string(rune('a'+i)), `{"order_id":"F-1","amount_satang":`+amount+`}`)
		if r.Status != http.StatusBadRequest {
			t.Errorf("amount %s: %d %s", amount, r.Status, r.Body)
		}
	}
	if r := env.pay("float-ok", `{"order_id":"F-1","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Errorf("amount 100: %d %s", r.Status, r.Body)
	}
}

// methodRefusal is a 405's problem slug, or its Stripe error code.
func methodRefusal(t *testing.T, r response) string {
	t.Helper()
	if r.Header.Get("Content-Type") == "application/problem+json" {
		return problemSlug(t, r)
	}
	e, _ := r.JSON(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}
