package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, one connection per request (as startProcess's client: Go's
// transport would otherwise resend a keyed request by itself).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// doorAnswer is one request's answer through the front door.
type doorAnswer struct {
	status int
	header http.Header
	body   string
	err    error
}

// send sends one request with client, with the header lines given as
// name, value pairs.
func send(ctx context.Context, client *http.Client, method, url, body string, header ...string) doorAnswer {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return doorAnswer{err: err}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		return doorAnswer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return doorAnswer{status: res.StatusCode, header: res.Header, body: string(b), err: err}
}

// TestClusterLimitsBoundAStudentAcrossTheServers runs the real "paytwice
// cluster -limits" on PostgreSQL. A student's address holds its share of
// requests in flight spread over both servers (payments held by step
// mode, which each server sees only part of): one more is answered 429
// problem+json by the front door, before any server, and so is any other
// request of that address; the presenter, at that very address (one NAT)
// by its token or its cookie, and another student are served as usual.
// Once step mode lets the held payments go, every one of them is charged,
// the refused one's retry with its key too, and the books hold exactly
// the charges the answers named.
func TestClusterLimitsBoundAStudentAcrossTheServers(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	bin := binary(t) // built first: the time below is for the cluster
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const share, reserve = 4, 2
	c := startCluster(ctx, t, bin, dbURL, "-servers", "2",
		"-limits", fmt.Sprintf("in-flight-per-address=%d,presenter-reserve=%d", share, reserve))
	if len(c.servers) != 2 {
		t.Fatalf("the cluster named %d servers, want 2:\n%s", len(c.servers), c.stdout.String())
	}
	const student, other = "127.0.0.2", "127.0.0.3"
	studentClient, otherClient, presenterClient := clientFrom(student), clientFrom(other), clientFrom("127.0.0.1")
	asPresenter := []string{web.PresenterHeader, clusterPresenterToken}

	// The presenter's token, sent from the presenter's own address, is
	// recognised by a server: from then on the door keeps the presenter's
	// reserve for it.
	if a := send(ctx, presenterClient, http.MethodPut, c.url+"/api/step", `{"on":true}`, asPresenter...); a.err != nil || a.status != http.StatusOK {
		t.Fatalf("step mode on: %v %d %s", a.err, a.status, a.body)
	}
	// The door sent the switch to one server; the other learns it from
	// the room a moment later. A payment it took before then would not be
	// held, so the student pays only once every server says step mode is on.
	for name, url := range c.servers {
		for {
			a := send(ctx, presenterClient, http.MethodGet, url+"/api/step", "", asPresenter...)
			var st struct {
				On bool `json:"on"`
			}
			if a.err == nil && a.status == http.StatusOK && json.Unmarshal([]byte(a.body), &st) == nil && st.On {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never said step mode is on: %v %d %s", name, a.err, a.status, a.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pay := func(client *http.Client, key string) doorAnswer {
		return send(ctx, client, http.MethodPost, c.url+"/v1/payments", fmt.Sprintf(`{"order_id":%q,"amount_satang":100}`, key), "Idempotency-Key", key)
	}
	answers := map[string]doorAnswer{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range share {
		key := fmt.Sprintf("held-%d", i)
		wg.Go(func() {
			a := pay(studentClient, key)
			mu.Lock()
			defer mu.Unlock()
			answers[key] = a
		})
	}
	// Every one of the student's payments is held at a checkpoint, on
	// one server or the other: the room's step list shows them all.
	// Each server is asked for the ones it holds itself: the room's list
	// of the others' comes by announcements, later.
	heldBy := func(name, url string) (int, string) {
		a := send(ctx, presenterClient, http.MethodGet, url+"/api/step", "", asPresenter...)
		var st struct {
			Held []struct {
				Server string `json:"server"`
			} `json:"held"`
		}
		if a.err != nil || a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &st) != nil {
			return 0, fmt.Sprintf("%s: %v %d %s", name, a.err, a.status, a.body)
		}
		n := 0
		for _, h := range st.Held {
			if h.Server == name {
				n++
			}
		}
		return n, fmt.Sprintf("%s: %s", name, a.body)
	}
	for held := 0; held != share; {
		var seen []string
		held = 0
		for name, url := range c.servers {
			n, said := heldBy(name, url)
			held += n
			seen = append(seen, said)
		}
		if held != share {
			if ctx.Err() != nil {
				mu.Lock()
				answered := fmt.Sprint(answers)
				mu.Unlock()
				t.Fatalf("the %d payments of %s were never all held; the servers' step lists: %v; answered before: %v", share, student, seen, answered)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	refused := pay(studentClient, "one-past-the-share")
	if refused.err != nil || refused.status != http.StatusTooManyRequests ||
		refused.header.Get("Content-Type") != "application/problem+json" || refused.header.Get("Retry-After") == "" ||
		!strings.Contains(refused.body, "in-flight-per-address") || !strings.Contains(refused.body, "nothing was done") {
		t.Fatalf("a payment past the student's share: %v %d %v %s", refused.err, refused.status, refused.header, refused.body)
	}
	var problem struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(refused.body), &problem); err != nil || problem.Status != http.StatusTooManyRequests {
		t.Fatalf("the refusal is not problem+json with its status: %v %s", err, refused.body)
	}
	if a := send(ctx, studentClient, http.MethodGet, c.url+"/api/step", ""); a.status != http.StatusTooManyRequests {
		t.Fatalf("another request of the full address: %v %d %s", a.err, a.status, a.body)
	}

	t.Run("the presenter and the other students are served as usual", func(t *testing.T) {
		if a := send(ctx, studentClient, http.MethodGet, c.url+"/api/step", "", asPresenter...); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("the presenter's token from the student's full address: %v %d %s", a.err, a.status, a.body)
		}
		// The presenter opened the board's link at the start of the
		// class: its cookie then serves from any address.
		noRedirect := &http.Client{Transport: presenterClient.Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noRedirect.Get(c.url + "/board?token=" + clusterPresenterToken)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		var cookie string
		for _, ck := range res.Cookies() {
			if ck.Name == web.PresenterCookie {
				cookie = ck.Name + "=" + ck.Value
			}
		}
		if cookie == "" {
			t.Fatalf("the presenter's link: %d and no cookie", res.StatusCode)
		}
		if a := send(ctx, studentClient, http.MethodGet, c.url+"/board", "", "Cookie", cookie); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("the presenter's board by its cookie from the student's full address: %v %d %.300s", a.err, a.status, a.body)
		}
		if a := send(ctx, otherClient, http.MethodGet, c.url+"/api/step", ""); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("another student: %v %d %s", a.err, a.status, a.body)
		}
	})

	// Step mode off lets every held payment go on.
	if a := send(ctx, presenterClient, http.MethodPut, c.url+"/api/step", `{"on":false}`, asPresenter...); a.err != nil || a.status != http.StatusOK {
		t.Fatalf("step mode off: %v %d %s", a.err, a.status, a.body)
	}
	wg.Wait()
	// The refused payment did nothing: its retry with the same key, once
	// the address has room, runs afresh.
	// The door gives an answered request's place back just after the
	// answer is flushed: while it still counts one, its 429 says nothing
	// was done, and the retry is sent again.
	for {
		a := pay(studentClient, "one-past-the-share")
		if a.status != http.StatusTooManyRequests || ctx.Err() != nil {
			answers["one-past-the-share"] = a
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	conn := connect(ctx, t, dbURL)
	for key, a := range answers {
		var charge struct {
			ID string `json:"charge_id"`
		}
		if a.err != nil || a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &charge) != nil || charge.ID == "" {
			t.Fatalf("%s: %v %d %s", key, a.err, a.status, a.body)
		}
		if n := count(ctx, t, conn, `SELECT count(*) FROM charges WHERE idempotency_key = $1 AND id = $2`, key, charge.ID); n != 1 {
			t.Fatalf("%s: the answer named charge %s, the books hold %d of it", key, charge.ID, n)
		}
	}
	checkBooks(ctx, t, conn, len(answers))
}
