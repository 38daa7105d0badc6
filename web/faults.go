package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/live"
	"paytwice/web/room"
)

// maxAdminBody bounds the bodies of the admin endpoints.
const maxAdminBody = 16 << 10

// faultSwitches are the room's fault switches as the server reads and
// changes them: the presenter's endpoints (admin_handlers.go), a lesson
// that sets them, a payment that draws from them. Every change is told on
// the timeline.
type faultSwitches struct {
	room *room.Room[room.State]
	// plan draws from the switches in random mode (sim.FaultPlan).
	plan     *sim.FaultPlan
	timeline timeline
	// workLimit is the gateway time-out: the switches' waits must fit in
	// a request's work.
	workLimit time.Duration
}

// faultSwitches are the server's room's switches.
func (s *Server) faultSwitches() faultSwitches {
	return faultSwitches{room: s.room, plan: s.world.faults, timeline: s.hub, workLimit: s.cfg.GatewayTimeout}
}

// currentFaults reads every switch: the room's.
func (fs faultSwitches) currentFaults() pay.Faults { return fs.room.Load().Faults }

// drawFaults returns the faults one request runs with: the room's
// switches, drawn from in random mode (sim.FaultPlan). A request draws
// once and keeps what it drew, whatever is switched meanwhile.
func (fs faultSwitches) drawFaults() (pay.ServerFaults, pay.GatewayFaults) {
	st := fs.room.Load()
	return fs.plan.Draw(st.Faults, st.FaultWrites)
}

// applyFaults validates f, makes it the current set of switches for the
// whole room, restarts the random sequence from its seed, and publishes
// one event that says what changed and who changed it. Requests already
// running keep the switches they drew.
func (fs faultSwitches) applyFaults(ctx context.Context, f pay.Faults, who string) error {
	if err := f.Validate(); err != nil {
		return err
	}
	old, next, err := fs.room.Change(ctx, func(r *room.State) error {
		r.SetFaults(f)
		return r.WorkFits(fs.workLimit)
	})
	if err != nil {
		return err
	}
	fs.publishFaultChanges(old.Faults, next.Faults, who)
	return nil
}

// publishFaultChanges says on the timeline what changed between old and
// next, if anything did.
func (fs faultSwitches) publishFaultChanges(old, next pay.Faults, who string) {
	if changes := room.FaultChanges(old, next); len(changes) > 0 {
		msg := strings.Join(changes, "; ")
		if who != "" {
			msg = who + ": " + msg
		}
		fs.timeline.Publish(live.Event{Kind: live.Switched, Message: msg})
	}
}

// patchFaults merges body into the room's switches as they are when the
// change holds the room, so two PATCHes at once, on one server or two,
// cannot lose one another's fields; it returns the switches after it.
func (fs faultSwitches) patchFaults(ctx context.Context, body []byte, who string) (pay.Faults, error) {
	old, next, err := fs.room.Change(ctx, func(r *room.State) error {
		f := r.Faults
		if err := decodeStrict(body, &f); err != nil {
			return err
		}
		if err := f.Validate(); err != nil {
			return err
		}
		r.SetFaults(f)
		return r.WorkFits(fs.workLimit)
	})
	if err != nil {
		return pay.Faults{}, err
	}
	fs.publishFaultChanges(old.Faults, next.Faults, who)
	return next.Faults, nil
}

// decodeAdminJSON reads an admin endpoint's JSON body strictly into v.
func decodeAdminJSON(r *http.Request, v any) error {
	body, err := readAdminBody(r)
	if err != nil {
		return err
	}
	return decodeStrict(body, v)
}

// readAdminBody insists on a JSON content type (which also keeps other
// sites' plain HTML forms out) and a small body.
func readAdminBody(r *http.Request) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != echo.MIMEApplicationJSON {
		return nil, pay.Errorf(pay.EMEDIATYPE, "Send the body as JSON with Content-Type: application/json (got %q).", pay.Truncate(r.Header.Get("Content-Type"), 40))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	if err != nil {
		return nil, pay.Errorf(pay.EINVALID, "The body could not be read.")
	}
	if len(body) > maxAdminBody {
		return nil, pay.Errorf(pay.ETOOLARGE, "The body is larger than %d bytes.", maxAdminBody)
	}
	return body, nil
}

// decodeStrict decodes one JSON object into v, refusing unknown fields,
// wrong types and trailing data, with a message that names the field.
func decodeStrict(body []byte, v any) error {
	bad := func(format string, args ...any) error { return pay.Errorf(pay.EINVALID, format, args...) }
	if len(bytes.TrimSpace(body)) == 0 {
		return bad("The body is empty; send a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typ *json.UnmarshalTypeError
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &typ) && typ.Field == "":
			return bad("The body must be a JSON object.")
		case errors.As(err, &typ):
			return bad("%s must be %s, not a JSON %s.", typ.Field, describeType(typ.Type.Kind().String()), typ.Value)
		case errors.As(err, &syn):
			return bad("The body is not valid JSON: %s at byte %d.", syn.Error(), syn.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return bad("The body is not valid JSON: it ends too early.")
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return bad("Unknown field %s.", pay.Truncate(name, 60))
		}
		return bad("The body is not valid JSON: %s.", err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("The body has data after the JSON object.")
	}
	return nil
}

// describeType names a Go kind the way a JSON user thinks of it.
func describeType(kind string) string {
	switch {
	case kind == "bool":
		return "true or false"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "a whole number"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "struct":
		return "a JSON object"
	case kind == "string":
		return "a string"
	}
	return "a " + kind
}
