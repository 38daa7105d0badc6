package web

import (
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// readPaymentBody checks the content type and the size, then decodes:
// JSON, or the form encoding Stripe's SDKs send. Both parse as strictly,
// into the same request.
func readPaymentBody(r *http.Request) (pay.PaymentRequest, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	decode := pay.DecodePayment
	switch {
	case err != nil:
	case mt == echo.MIMEApplicationJSON:
	case mt == echo.MIMEApplicationForm:
		decode = pay.DecodePaymentForm
	default:
		err = errUnsupportedMediaType
	}
	if err != nil {
		return pay.PaymentRequest{}, pay.Errorf(pay.EMEDIATYPE, "Send the body as JSON (Content-Type: application/json) or as a form (application/x-www-form-urlencoded); got %q.", pay.Truncate(r.Header.Get("Content-Type"), 40))
	}
	body, err := readAll(io.LimitReader(r.Body, pay.MaxBodyBytes+1), r.ContentLength)
	if err != nil {
		return pay.PaymentRequest{}, pay.Errorf(pay.EINVALID, "The body could not be read.")
	}
	if len(body) > pay.MaxBodyBytes {
		return pay.PaymentRequest{}, pay.Errorf(pay.ETOOLARGE, "The body is larger than %d bytes.", pay.MaxBodyBytes)
	}
	return decode(body)
}

var errUnsupportedMediaType = errors.New("unsupported media type")

// readAll is io.ReadAll with a first buffer the size the request declared
// (when it declared one within the limit), so that a body of a few dozen
// bytes does not take io.ReadAll's 512. It reads to the end, as ReadAll
// does: net/http watches the connection for a client that goes away only
// once the body has been read to its end.
func readAll(r io.Reader, declared int64) ([]byte, error) {
	size := 512
	if declared >= 0 && declared <= pay.MaxBodyBytes {
		size = int(declared) + 1 // + 1: room to read the end without growing
	}
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}
