package security

import (
	"net/http"
	"strconv"
)

// LimitBody returns a handler that refuses request bodies larger than maxBytes: a declared
// Content-Length above the limit is answered 413 Request Entity Too Large before h runs, and a body
// without a length (chunked) is read through http.MaxBytesReader, so h's read fails with
// *http.MaxBytesError after maxBytes bytes and the server closes the connection. h should answer
// that error with 413 (errors.As(err, new(*http.MaxBytesError))). maxBytes <= 0 panics: a limit is
// the point.
func LimitBody(h http.Handler, maxBytes int64) http.Handler {
	if maxBytes <= 0 {
		panic("security.LimitBody: maxBytes must be positive, got " + strconv.FormatInt(maxBytes, 10))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBytes {
			// Closing the connection spares reading the oversize body just to keep it alive.
			w.Header().Set("Connection", "close")
			http.Error(w, "request body is "+strconv.FormatInt(r.ContentLength, 10)+
				" bytes, the limit is "+strconv.FormatInt(maxBytes, 10), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
		h.ServeHTTP(w, r)
	})
}
