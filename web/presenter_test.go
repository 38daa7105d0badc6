package web

import (
	"net/http"
	"paytwice/pay"
	"testing"
)

func TestPresenterGuard(t *testing.T) {
	waitsOnRealClocks(t)
	const token = "lecture-7f3a"
	// Each state-changing admin route, with a body it accepts.
	routes := []struct{ method, path, body string }{
		{http.MethodPut, "/api/faults", `{}`},
		{http.MethodPatch, "/api/faults", `{"server":{"delay_ms":100}}`},
		{http.MethodPost, "/api/sweep", ""},
		{http.MethodPost, "/api/reset", ""},
		{http.MethodPost, "/api/clock/advance", `{"seconds":60}`},
	}
	for _, rt := range routes {
		name := rt.method + " " + rt.path
		t.Run(name+" is refused with 403 when the token is missing", func(t *testing.T) {
			env := newFIEnv(t, Config{PresenterToken: token})
			r := env.must(rt.method, rt.path, rt.body)
			if r.Status != http.StatusForbidden || problemSlug(t, r) != "forbidden" {
				t.Fatalf("got %d %s, want 403 forbidden", r.Status, r.Body)
			}
		})
		t.Run(name+" is refused with 403 when the token is wrong", func(t *testing.T) {
			env := newFIEnv(t, Config{PresenterToken: token})
			if r := env.must(rt.method, rt.path, rt.body, PresenterHeader, token+"x"); r.Status != http.StatusForbidden {
				t.Fatalf("got %d, want 403", r.Status)
			}
			if r := env.must(rt.method, rt.path, rt.body, "Cookie", PresenterCookie+"=nope"); r.Status != http.StatusForbidden {
				t.Fatalf("wrong cookie: got %d, want 403", r.Status)
			}
		})
		t.Run(name+" is allowed with the token in the header", func(t *testing.T) {
			env := newFIEnv(t, Config{PresenterToken: token})
			if r := env.must(rt.method, rt.path, rt.body, PresenterHeader, token); r.Status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", r.Status, r.Body)
			}
		})
		t.Run(name+" is allowed with the presenter cookie", func(t *testing.T) {
			env := newFIEnv(t, Config{PresenterToken: token})
			if r := env.must(rt.method, rt.path, rt.body, "Cookie", PresenterCookie+"="+env.Server.admission.presenter.cookie); r.Status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", r.Status, r.Body)
			}
		})
		t.Run(name+" is refused with the cookie when another site sends it", func(t *testing.T) {
			env := newFIEnv(t, Config{PresenterToken: token})
			r := env.must(rt.method, rt.path, rt.body, "Cookie", PresenterCookie+"="+env.Server.admission.presenter.cookie, "Origin", "http://evil.example")
			if r.Status != http.StatusForbidden {
				t.Fatalf("got %d, want 403", r.Status)
			}
			r = env.must(rt.method, rt.path, rt.body, "Cookie", PresenterCookie+"="+env.Server.admission.presenter.cookie, "Sec-Fetch-Site", "cross-site")
			if r.Status != http.StatusForbidden {
				t.Fatalf("got %d, want 403", r.Status)
			}
		})
		t.Run(name+" is open to anyone when no token is configured", func(t *testing.T) {
			env := newFIEnv(t, Config{})
			if r := env.must(rt.method, rt.path, rt.body); r.Status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", r.Status, r.Body)
			}
		})
	}
	t.Run("reading the switches stays open to students", func(t *testing.T) {
		env := newFIEnv(t, Config{PresenterToken: token})
		if r := env.must(http.MethodGet, "/api/faults", ""); r.Status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.Status)
		}
	})
	t.Run("a refused change leaves the switches as they were", func(t *testing.T) {
		env := newFIEnv(t, Config{PresenterToken: token})
		env.must(http.MethodPatch, "/api/faults", `{"gateway":{"decline":true}}`)
		if f := getFaults(t, env); f != (pay.Faults{}) {
			t.Fatalf("switches changed to %+v", f)
		}
	})
	t.Run("isPresenter accepts the cookie on a page view from another site", func(t *testing.T) {
		env := newFIEnv(t, Config{PresenterToken: token})
		req, _ := http.NewRequest(http.MethodGet, env.URL+"/board", nil)
		req.AddCookie(&http.Cookie{Name: PresenterCookie, Value: env.Server.admission.presenter.cookie})
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		if !env.Server.admission.presenter.isPresenter(req) {
			t.Fatal("a GET with the cookie, followed from a link elsewhere, should still be the presenter")
		}
	})
}
