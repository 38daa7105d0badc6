package pay

import (
	"errors"
	"fmt"
)

// Code classifies a domain error. The web layer maps each code to an HTTP
// status and a problem type; nothing in this package knows about HTTP.
type Code string

// The codes double as the slugs of the problem explanation pages.
const (
	ECONFLICT    Code = "request-in-progress"    // the key's first request is still running
	EMISMATCH    Code = "key-reused"             // same key, different request
	EMISSINGKEY  Code = "missing-key"            // no Idempotency-Key header
	EINVALIDKEY  Code = "invalid-key"            // malformed Idempotency-Key header
	EINVALID     Code = "invalid-request"        // the body or a parameter is wrong
	EMETHOD      Code = "method-not-allowed"     // the route exists, the method does not
	ETOOLARGE    Code = "body-too-large"         // the body exceeds the limit
	EMEDIATYPE   Code = "unsupported-media-type" // the body is not JSON
	ENOTFOUND    Code = "not-found"              // no such object
	EDECLINED    Code = "payment-declined"       // the gateway declined the card
	EGATEWAY     Code = "gateway-error"          // the gateway answered with a failure
	ETIMEOUT     Code = "gateway-timeout"        // the gateway did not answer: outcome unknown
	EINTERNAL    Code = "server-error"           // our own failure
	EFORBIDDEN   Code = "forbidden"              // the caller may not do this
	EUNAVAILABLE Code = "unavailable"            // shutting down or dropped
	EBUSY        Code = "too-many-requests"      // too much heavy work queued: try later
)

// Codes of the edge's own refusals.
const (
	EUNAUTHORIZED   Code = "unauthorized"          // the Authorization header names no caller
	ETOOMANYGUESSES Code = "too-many-wrong-tokens" // too many wrong presenter tokens from one address
)

// Error is paytwice's one domain error type.
type Error struct {
	Code    Code
	Message string // for humans; safe to show to the caller
	// Differs names, for a key sent with another request (EMISMATCH),
	// the parts of this request that differ from the one the key first
	// saw, by their names in the API: "order_id", "amount_satang",
	// "method", "path". A client explains the refusal from it instead of
	// guessing what changed.
	Differs []string
}

// ErrorDiffers returns the parts of the request that a key-reused error
// names as different (Error.Differs), nil for any other error.
func ErrorDiffers(err error) []string {
	if e, ok := errors.AsType[*Error](err); ok && e.Code == EMISMATCH {
		return e.Differs
	}
	return nil
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err if it is (or wraps) an *Error, and
// EINTERNAL for anything else: an unexpected error is our fault.
func ErrorCode(err error) Code {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the human message of err if it is an *Error, and a
// generic message otherwise, so internal details never reach a caller.
func ErrorMessage(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Message
	}
	return "The server failed while handling the request."
}
