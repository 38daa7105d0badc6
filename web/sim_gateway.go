package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/sim"
)

// simGatewayPrefix is where the simulated gateway is served over HTTP,
// for applications under test to charge through (paytwice check
// -gateway): a provider of its own, in memory, apart from the gateway
// this server's payments use.
const simGatewayPrefix = "/sim/gateway"

func (s *Server) simGatewayRoutes(e *echo.Echo) {
	h := http.StripPrefix(simGatewayPrefix, sim.NewGatewayHandler(s.clock.Now))
	e.Any(simGatewayPrefix+"/*", echo.WrapHandler(h))
}
