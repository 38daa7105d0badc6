package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// simGatewayPrefix is where the simulated gateway is served over HTTP,
// for applications under test to charge through (paytwice check
// -gateway): a provider of its own, in memory, apart from the gateway
// this server's payments use.
const simGatewayPrefix = "/sim/gateway"

// simGatewayMerchantHeader is how an application under test proves it is
// the merchant the gateway serves: "Authorization: Bearer <merchant
// key>", the way a real provider's secret key is sent.
const simGatewayMerchantHeader = "Authorization"

// notTheGatewaysMerchant refuses a charge from anyone but the application
// the simulated gateway serves or the presenter.
const notTheGatewaysMerchant = "The simulated gateway takes charges only from the application it serves: send \"Authorization: Bearer <merchant key>\" (the presenter gives it out) or the presenter's " + PresenterHeader + "."

// simGatewayHandlers serve the simulated gateway over HTTP. They hold the
// gateway's own handler, the presenter's token (the merchant key is
// derived from it) and the presenter's check.
type simGatewayHandlers struct {
	gateway        http.Handler
	presenterToken string
	// presenterOnly and requirePresenter are the presenter's check
	// (presenter.go), as a route's middleware and as a call.
	presenterOnly    echo.MiddlewareFunc
	requirePresenter func(c echo.Context, refusal string) error
}

// routes serves the simulated gateway. Its books stay open to
// read (GET), so that anyone may count an order's charges. With a
// presenter token set, what changes it is not: its switches and its
// reset take the presenter's token (header or cookie), and a charge takes
// either the presenter's token or the merchant key the presenter hands to
// the application under test (GET /sim/gateway/merchant-key); a student
// who posts charges or flips switches gets 403 and changes nothing.
// Without a token, a learner alone with the app may do everything.
func (h simGatewayHandlers) routes(e *echo.Echo) {
	gw := http.StripPrefix(simGatewayPrefix, h.gateway)
	open, merchant := echo.WrapHandler(gw), h.merchantOrPresenter(echo.WrapHandler(gw))
	// Any first: the routes after it take their methods back from it.
	e.Any(simGatewayPrefix+"/*", open, h.presenterOnly)
	e.GET(simGatewayPrefix+"/*", open)
	e.HEAD(simGatewayPrefix+"/*", open)
	e.POST(simGatewayPrefix+"/charges", merchant)
	e.GET(simGatewayPrefix+"/merchant-key", h.handleMerchantKey, h.presenterOnly)
}

// merchantKey is the secret an application under test charges the
// simulated gateway with when the server has a presenter token: derived
// from the token, so every server of a class gives the same one and a
// new token makes a new one, and never the token itself, so the
// application cannot flip the room's switches with it.
func (h simGatewayHandlers) merchantKey() string {
	if h.presenterToken == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(h.presenterToken))
	m.Write([]byte("paytwice simulated gateway merchant key"))
	return "sk_sim_" + hex.EncodeToString(m.Sum(nil)[:16])
}

// SimGatewayMerchantKey is the body of GET /sim/gateway/merchant-key.
type SimGatewayMerchantKey struct {
	// Header is what the application under test sends with each charge;
	// empty when the server has no presenter token and charges are open.
	Header string `json:"header"`
}

func (h simGatewayHandlers) handleMerchantKey(c echo.Context) error {
	v := SimGatewayMerchantKey{}
	if k := h.merchantKey(); k != "" {
		v.Header = simGatewayMerchantHeader + ": Bearer " + k
	}
	return c.JSON(http.StatusOK, v)
}

// merchantOrPresenter lets a charge through when it carries the merchant
// key or comes from the presenter.
func (h simGatewayHandlers) merchantOrPresenter(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		want := h.merchantKey()
		if want == "" {
			return next(c)
		}
		if tok, _, ok := bearerToken(c.Request().Header.Get(simGatewayMerchantHeader)); ok {
			if subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
				return next(c)
			}
			return pay.Errorf(pay.EFORBIDDEN, "This merchant key is not the simulated gateway's: the presenter gives it out (GET %s/merchant-key).", simGatewayPrefix)
		}
		if err := h.requirePresenter(c, notTheGatewaysMerchant); err != nil {
			return err
		}
		return next(c)
	}
}
