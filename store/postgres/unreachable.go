package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"paytwice/pay"
)

// errRefused is what a caller is told when the database would not take
// the connection a request needed.
var errRefused = &pay.Error{Code: pay.EUNAVAILABLE,
	Message: "The database is refusing connections (too many clients, or it is starting or unreachable); nothing was recorded: retry with the same key."}

// unreachable turns a failure to get a connection into errRefused, keeping
// the database's own words for the log, and leaves any other error alone.
// Past max_connections a new connection is refused with SQLSTATE 53300;
// while the server starts or stops, with 57P03; and a server that cannot
// be reached at all is a ConnectError.
func unreachable(err error) error {
	if err == nil {
		return nil
	}
	if code := sqlState(err); code == "53300" || code == "57P03" {
		return fmt.Errorf("%w (%v)", errRefused, err)
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return fmt.Errorf("%w (%v)", errRefused, err)
	}
	return err
}
