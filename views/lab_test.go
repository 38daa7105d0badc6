package views

import (
	"strings"
	"testing"

	"github.com/a-h/templ"
	"golang.org/x/net/html"

	"paytwice/web/lab"
	"paytwice/web/room"
)

func sampleLab(presenter bool) Lab {
	out := map[string]LabOutcome{}
	for _, m := range lab.Mistakes {
		out[m.Name] = LabOutcome{Unit: "nothing yet", Tone: ToneMute}
	}
	out["no_key"] = LabOutcome{N: 2, Unit: "orders charged more than once", Tone: ToneBad, Lines: []string{"Charged twice: A-1001, A-1002"}}
	out["retry_every_4xx"] = LabOutcome{N: 5, Unit: "wasted attempts", Tone: ToneBad}
	settings := room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsertConstrained, CheckGapMS: 200, RetentionSeconds: 60},
		Client: room.LabClient{NewKeyAfter500: true}}
	return Lab{
		Switches: LabSwitches{Mode: settings.Server.Mode, CheckGapMS: 200, RetentionSeconds: 60,
			DefaultRetention: "24 h", Client: lab.ClientSwitches(settings.Client), Retentions: []int64{0, 60, 86400},
			On: lab.On(settings, "1 min")},
		BurstSize: 10, WarpSeconds: 120,
		Outcomes: out, ExtraCharges: 3, Presenter: presenter, SettingsV: 7, OutcomesV: 42,
	}
}

func sampleLesson(shown string, current string, presenter bool) Lesson {
	l := Lesson{Current: current, Presenter: presenter, Locked: !presenter, V: 3, Chapters: []ChapterLink{
		{Slug: "response-lost", Title: "It succeeds, but the response is lost", Part: "How a request fails", N: 1},
		{Slug: "no-key", Title: "Mistake: no idempotency key", Part: "Common mistakes", N: 2},
	}}
	defer func() {
		if l.Shown != nil && l.Shown.Slug == current {
			l.Shown.Switches = SwitchesAsSet // the class is on it, its switches as it set them
		}
	}()
	switch shown {
	case "response-lost":
		l.Shown = &Chapter{Slug: "response-lost", Title: "It succeeds, but the response is lost", Part: "How a request fails", N: 1, Of: 2,
			SwitchOn: []string{"Response lost."}, Do: []string{"Press Pay once."}, Watch: []string{"One charge."}, Why: "The key.",
			Retry: true, Next: "no-key", Actions: []LessonAction{{ID: "faults-off", Label: "Turn the fault off", Presenter: true}, {ID: "burst", Arg: "10", Label: "Burst"}}}
	case "no-key":
		l.Shown = &Chapter{Slug: "no-key", Title: "Mistake: no idempotency key", Part: "Common mistakes", N: 2, Of: 2,
			SwitchOn: []string{"No key."}, Do: []string{"Double-click Pay."}, Watch: []string{"Two charges."}, Why: "No memory.", Prev: "response-lost"}
	}
	return l
}

func TestLabPanel(t *testing.T) {
	doc := render(t, LabPanel(sampleLab(true)))
	panel := byID(t, doc, "lab")

	t.Run("a card says what real clients do, and links to the measurements", func(t *testing.T) {
		card := byID(t, panel, "lab-real-clients")
		links := findAll(card, func(x *html.Node) bool { v, _ := attr(x, "href"); return x.Data == "a" && v == "/clients" })
		if len(links) != 1 || !strings.Contains(text(card), "RemoteDisconnected") || !strings.Contains(text(card), "two payments") {
			t.Fatalf("the real clients' card: %q", text(card))
		}
	})

	t.Run("one card per mistake, each with its switch and its measured outcome", func(t *testing.T) {
		for _, m := range lab.Mistakes {
			n := m.N
			card := byID(t, doc, "mistake-"+itoa(n))
			if len(findAll(card, func(x *html.Node) bool { v, _ := attr(x, "id"); return v == LabControlID(m) })) != 1 {
				t.Errorf("mistake %d has no switch", n)
			}
			if len(findAll(card, func(x *html.Node) bool { v, _ := attr(x, "id"); return v == LabOutcomeID(m) })) != 1 {
				t.Errorf("mistake %d has no outcome", n)
			}
			if why := byClass(card, "lab-why"); len(why) != 1 || len(text(why[0])) < 200 {
				t.Errorf("mistake %d has no paragraph of explanation", n)
			}
		}
	})
	t.Run("the page knows which versions it shows", func(t *testing.T) {
		if v, _ := attr(panel, "data-v-settings"); v != "7" {
			t.Errorf("settings version %q", v)
		}
		if v, _ := attr(panel, "data-v-outcomes"); v != "42" {
			t.Errorf("outcomes version %q", v)
		}
	})
	t.Run("the switches show the server's settings", func(t *testing.T) {
		checked := func(id string) bool { _, ok := attr(byID(t, doc, id), "checked"); return ok }
		if checked("lab-nokey") || checked("lab-keyonly") || !checked("lab-newkey-500") || checked("lab-pii") {
			t.Error("a checkbox does not match the settings")
		}
		selected := func(id string) string {
			for _, o := range findAll(byID(t, doc, id), func(x *html.Node) bool { return x.Data == "option" }) {
				if _, ok := attr(o, "selected"); ok {
					v, _ := attr(o, "value")
					return v
				}
			}
			return ""
		}
		if got := selected("lab-check"); got != room.LabCheckThenInsertConstrained {
			t.Errorf("check-then-insert select shows %q", got)
		}
		if got := selected("lab-gap"); got != "200" {
			t.Errorf("gap select shows %q", got)
		}
		if got := selected("lab-retention"); got != "60" {
			t.Errorf("retention select shows %q", got)
		}
		if m, _ := attr(byID(t, doc, "lab-nokey"), "data-lab-mode"); m != room.LabNoKey {
			t.Errorf("the no-key switch sets mode %q", m)
		}
		if m, _ := attr(byID(t, doc, "lab-memlock"), "data-lab-mode"); m != room.LabMemoryLock || checked("lab-memlock") {
			t.Errorf("the lock-in-memory switch sets mode %q, checked %v", m, checked("lab-memlock"))
		}
		if got := selected("lab-lock-gap"); got != "200" {
			t.Errorf("the lock's gap select shows %q", got)
		}
		if f, _ := attr(byID(t, doc, "lab-pii"), "data-lab"); f != "client.personal_data_key" {
			t.Errorf("the e-mail switch names %q", f)
		}
	})
	t.Run("money gone wrong is red and counted in words", func(t *testing.T) {
		out := byID(t, doc, LabOutcomeID(mistake(t, "no_key")))
		if !hasClass(out, "bad") || !strings.HasPrefix(text(out), "2 orders charged more than once") {
			t.Errorf("outcome 1: %q, class bad %v", text(out), hasClass(out, "bad"))
		}
		if got := text(byID(t, doc, LabOutcomeID(mistake(t, "retry_every_4xx")))); !strings.HasPrefix(got, "5 wasted attempts") {
			t.Errorf("outcome 4: %q", got)
		}
		if got := text(byID(t, doc, "lab-summary")); !strings.Contains(got, "3 check first, constraints back") || !strings.Contains(got, "3 extra charges") {
			t.Errorf("summary %q", got)
		}
	})
	t.Run("a student's switches are disabled, but the burst and the e-mail are not", func(t *testing.T) {
		doc := render(t, LabPanel(sampleLab(false)))
		for _, m := range lab.Mistakes {
			if _, ok := attr(byID(t, doc, LabControlID(m)), "disabled"); !ok {
				t.Errorf("mistake %d's switch is enabled for a student", m.N)
			}
		}
		burst := findAll(doc, func(x *html.Node) bool { v, _ := attr(x, "data-lab-action"); return v == "burst" })
		if _, ok := attr(burst[0], "disabled"); ok {
			t.Error("a student cannot send a burst")
		}
		if _, ok := attr(byID(t, doc, "lab-email"), "disabled"); ok {
			t.Error("a student cannot type the e-mail")
		}
		warp := findAll(doc, func(x *html.Node) bool { v, _ := attr(x, "data-lab-action"); return v == "warp-prune" })
		if _, ok := attr(warp[0], "disabled"); !ok {
			t.Error("a student can warp the clock")
		}
		if attrOr(burst[0], "data-arg") != "10" || attrOr(warp[0], "data-arg") != "120" || !strings.Contains(text(warp[0]), "Warp 2 minutes") {
			t.Errorf("burst %q, warp %q (%q): not the numbers the lab was given", attrOr(burst[0], "data-arg"), attrOr(warp[0], "data-arg"), text(warp[0]))
		}
		var offered []string
		for _, o := range findAll(byID(t, doc, "lab-retention"), func(x *html.Node) bool { return x.Data == "option" }) {
			offered = append(offered, attrOr(o, "value"))
		}
		if strings.Join(offered, " ") != "0 60 86400" {
			t.Errorf("retentions offered: %v", offered)
		}
	})
	t.Run("with nothing on, the summary says so", func(t *testing.T) {
		doc := render(t, LabSummary(Lab{}))
		if got := text(doc); got != "every mistake off no extra charges" {
			t.Errorf("summary %q", got)
		}
	})
	t.Run("on the board the summary is in the fold's heading, once", func(t *testing.T) {
		l := sampleLab(true)
		l.Board = true
		doc := render(t, BoardLab(l))
		sum := findAll(doc, func(x *html.Node) bool { return x.Data == "summary" })
		if len(sum) != 1 || !strings.Contains(text(sum[0]), "3 extra charges") {
			t.Fatalf("summaries %d", len(sum))
		}
		byID(t, doc, "lab-summary") // exactly one
	})
}

func TestLessonPanel(t *testing.T) {
	t.Run("with no lesson, the index and a Start button for the presenter only", func(t *testing.T) {
		doc := render(t, LessonPanel(sampleLesson("", "", true)))
		start := byID(t, doc, "lesson-start")
		if v, _ := attr(start, "data-lesson-go"); v != "response-lost" {
			t.Errorf("start goes to %q", v)
		}
		if _, ok := attr(start, "disabled"); ok {
			t.Error("the presenter's Start is disabled")
		}
		links := findAll(doc, func(x *html.Node) bool { return x.Data == "a" && strings.HasPrefix(attrOr(x, "href"), "/?lesson=") })
		if len(links) != 2 || attrOr(links[1], "href") != "/?lesson=no-key" {
			t.Errorf("chapter links %d", len(links))
		}
		student := render(t, LessonPanel(sampleLesson("", "", false)))
		if n := len(findAll(student, func(x *html.Node) bool { return attrOr(x, "id") == "lesson-start" })); n != 0 {
			t.Error("a student has a Start button")
		}
	})
	t.Run("a running chapter: its four parts, its buttons, and what it wants of the page", func(t *testing.T) {
		doc := render(t, LessonPanel(sampleLesson("response-lost", "response-lost", true)))
		panel := byID(t, doc, "lesson")
		for name, want := range map[string]string{"data-slug": "response-lost", "data-running": "true", "data-retry": "on", "data-v-lesson": "3"} {
			if v, _ := attr(panel, name); v != want {
				t.Errorf("%s = %q, want %q", name, v, want)
			}
		}
		steps := byClass(doc, "lesson-step")
		var heads []string
		for _, s := range steps {
			heads = append(heads, text(findAll(s, func(x *html.Node) bool { return x.Data == "h3" })[0]))
		}
		// The fold of "Watch for" counts what was seen: nothing yet.
		if strings.Join(heads, ", ") != "Switched on, Do, Watch for (0 of 1 seen), Why" {
			t.Errorf("parts %v", heads)
		}
		if v, _ := attr(byID(t, doc, "lesson-next"), "data-lesson-go"); v != "no-key" || text(byID(t, doc, "lesson-next")) != "Continue →" {
			t.Errorf("continue goes to %q", v)
		}
		if v, _ := attr(byID(t, doc, "lesson-restart"), "data-lesson-go"); v != "response-lost" {
			t.Errorf("restart goes to %q", v)
		}
		actions := findAll(doc, func(x *html.Node) bool { _, ok := attr(x, "data-lab-action"); return ok })
		if len(actions) != 2 || attrOr(actions[1], "data-arg") != "10" {
			t.Errorf("%d actions", len(actions))
		}
	})
	t.Run("the last chapter finishes", func(t *testing.T) {
		doc := render(t, LessonPanel(sampleLesson("no-key", "no-key", true)))
		next := byID(t, doc, "lesson-next")
		if v, ok := attr(next, "data-lesson-go"); !ok || v != "" || text(next) != "Finish" {
			t.Errorf("the last button is %q going to %q", text(next), v)
		}
		if v, _ := attr(byID(t, doc, "lesson-prev"), "data-lesson-go"); v != "response-lost" {
			t.Errorf("back goes to %q", v)
		}
	})
	t.Run("a linked chapter that is not running offers to start it, and names the class's", func(t *testing.T) {
		doc := render(t, LessonPanel(sampleLesson("no-key", "response-lost", true)))
		if v, _ := attr(byID(t, doc, "lesson-start"), "data-lesson-go"); v != "no-key" {
			t.Errorf("start goes to %q", v)
		}
		if got := text(byClass(doc, "lesson-note")[0]); !strings.Contains(got, "not started") || !strings.Contains(got, "It succeeds, but the response is lost") {
			t.Errorf("note %q", got)
		}
		if v, _ := attr(byID(t, doc, "lesson"), "data-retry"); v != "" {
			t.Errorf("a chapter not running sets retries %q", v)
		}
		if len(findAll(doc, func(x *html.Node) bool { _, ok := attr(x, "data-lab-action"); return ok })) != 0 {
			t.Error("a chapter not running offers its actions")
		}
	})
	t.Run("a student following sees no presenter's button, and what the presenter moves on", func(t *testing.T) {
		doc := render(t, LessonPanel(sampleLesson("response-lost", "response-lost", false)))
		for _, id := range []string{"lesson-next", "lesson-restart", "lesson-prev", "lesson-leave"} {
			if n := len(findAll(doc, func(x *html.Node) bool { return attrOr(x, "id") == id })); n != 0 {
				t.Errorf("a student has #%s", id)
			}
		}
		if n := len(findAll(doc, func(x *html.Node) bool { _, ok := attr(x, "disabled"); return ok })); n != 0 {
			t.Errorf("%d disabled controls for a student", n)
		}
		actions := findAll(doc, func(x *html.Node) bool { _, ok := attr(x, "data-lab-action"); return ok })
		if len(actions) != 1 || attrOr(actions[0], "data-lab-action") != "burst" {
			t.Errorf("a student's actions: %d, want the burst only", len(actions))
		}
		if got := text(byClass(doc, "lesson-note")[0]); !strings.Contains(got, "presenter moves the class on") {
			t.Errorf("note %q", got)
		}
	})
}

// mistake finds a mistake of the lab's table by its name.
func mistake(t *testing.T, name string) lab.Mistake {
	t.Helper()
	m, ok := lab.ByName(name)
	if !ok {
		t.Fatalf("no mistake %q", name)
	}
	return m
}

func attrOr(n *html.Node, name string) string {
	v, _ := attr(n, name)
	return v
}

func TestPersonalDataFlag(t *testing.T) {
	t.Run("the key table and the timeline flag it", func(t *testing.T) {
		row := renderRow(t, KeyRowView(KeyRow{ID: "k-1", Key: "somchai.j@example.com", PersonalData: "an e-mail address", Status: "done", Code: 201}, t0, false))
		if flags := byClass(row, "pii"); len(flags) != 1 || text(flags[0]) != "personal data" {
			t.Fatalf("%d flags in the key row", len(flags))
		}
		tl := sampleRow()
		tl.Key, tl.PersonalData = "+66812345678", "a phone number"
		if len(byClass(render(t, TimelineRowView(tl)), "pii")) != 1 {
			t.Fatal("no flag on the timeline")
		}
		if len(byClass(render(t, TimelineRowView(sampleRow())), "pii")) != 0 {
			t.Fatal("a random key is flagged")
		}
	})
}

func TestLabPagesNeedNoInlineCode(t *testing.T) {
	l := sampleLab(true)
	pages := map[string]templ.Component{
		"checkout with the lab and a lesson": CheckoutPage(Checkout{OrderID: "A-1001", Amount: 129900, Key: "k",
			BackoffBaseMS: 500, BackoffCapMS: 8000, MaxRetries: 5, Presenter: true, Lab: l, Lesson: sampleLesson("response-lost", "response-lost", true)}),
		"board with the lab and a lesson": BoardPage(Board{Lab: l, Lesson: sampleLesson("no-key", "no-key", false)}),
		"error page":                      ErrorPage("Not found", "There is no lesson called \"x\".", 404),
	}
	for name, c := range pages {
		t.Run(name, func(t *testing.T) {
			doc := render(t, c)
			for _, n := range findAll(doc, func(*html.Node) bool { return true }) {
				if n.Data == "style" || (n.Data == "script" && !strings.HasPrefix(attrOr(n, "src"), "/static/")) {
					t.Errorf("inline <%s>", n.Data)
				}
				for _, a := range n.Attr {
					if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
						t.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
					}
				}
			}
			seen := map[string]bool{}
			for _, n := range findAll(doc, func(n *html.Node) bool { _, ok := attr(n, "id"); return ok }) {
				id := attrOr(n, "id")
				if seen[id] {
					t.Errorf("id %q twice", id)
				}
				seen[id] = true
			}
			if name == "error page" {
				meta := findAll(doc, func(n *html.Node) bool { return n.Data == "meta" && attrOr(n, "name") == "htmx-config" })
				if len(meta) != 1 || !strings.Contains(attrOr(meta[0], "content"), `"includeIndicatorStyles":false`) {
					t.Error("the error page lets htmx add an inline style")
				}
			}
		})
	}
}
