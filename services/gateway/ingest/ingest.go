// Package ingest is the gateway's HTTP endpoint for applications that cannot speak NATS:
// POST /servescope/v1/records with one app.record JSON object or an array of them.
//
// Contract:
//   - Authorization: Bearer <SERVESCOPE_INGEST_TOKEN>, compared in constant time. When the
//     gateway has no token configured the endpoint is disabled and answers 404 (never open).
//   - Each record is an app.record/v1 event (schema/jsonschema/app.record.v1.json). For
//     convenience `schema`, `event_id` (a new KSUID) and `ts` (now) are filled in when absent;
//     `request_id` is required.
//   - All or nothing: when any record is invalid, none is published and the answer is 400 with
//     {"error":..., "errors":[{"index":i,"field":...,"reason":...}]}.
//   - 202 {"accepted":n,"event_ids":[...]} once the records are handed to the publisher (which
//     delivers them to JetStream or spools them; it never loses them unless its spool is full).
//   - 413 over the size limit, 401 without the right token, 405 for another method, 415 for a
//     content type other than JSON.
package ingest

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/servescope/servescope/schema"
)

// Path is where the handler is mounted.
const Path = "/servescope/v1/records"

// MaxRecords bounds the records of one request.
const MaxRecords = 1000

// Publisher takes validated events; *publish.Publisher implements it.
type Publisher interface {
	Publish(e schema.Event) error
}

// Handler serves POST /servescope/v1/records.
type Handler struct {
	token    []byte
	maxBytes int64
	pub      Publisher
	log      *slog.Logger
	now      func() time.Time
}

// New returns the handler. An empty token disables the endpoint (404). maxBytes bounds the body.
func New(token string, maxBytes int64, pub Publisher, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{token: []byte(token), maxBytes: maxBytes, pub: pub, log: log, now: time.Now}
}

// fieldError is one invalid field of one record.
type fieldError struct {
	Index  int    `json:"index"`
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(h.token) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "record ingest is disabled: the gateway has no SERVESCOPE_INGEST_TOKEN"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "use POST"})
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="servescope"`)
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "missing or wrong bearer token"})
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]any{"error": fmt.Sprintf("content type %q: send application/json", ct)})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.maxBytes+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "read body: " + err.Error()})
		return
	}
	if int64(len(body)) > h.maxBytes {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": fmt.Sprintf("body exceeds %d bytes", h.maxBytes)})
		return
	}
	recs, errs, err := h.decode(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid records; none was accepted", "errors": errs})
		return
	}
	ids := make([]string, 0, len(recs))
	for _, rec := range recs {
		if err := h.pub.Publish(rec); err != nil {
			// Validated above, so only a closed publisher (shutdown) gets here.
			h.log.Error("publish ingested record", "event_id", rec.EventID, "error", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "gateway is shutting down", "accepted": len(ids), "event_ids": ids})
			return
		}
		ids = append(ids, rec.EventID)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"accepted": len(ids), "event_ids": ids})
}

func (h *Handler) authorized(r *http.Request) bool {
	// The scheme name is case-insensitive (RFC 9110 §11.1): "bearer x" is as good as "Bearer x".
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), h.token) == 1
}

// decode parses one record or an array and validates each; it returns the field errors of all
// invalid records, or an error when the body is not JSON of that shape.
func (h *Handler) decode(body []byte) ([]*schema.AppRecord, []fieldError, error) {
	if !utf8.Valid(body) {
		return nil, nil, errors.New("body is not valid UTF-8")
	}
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	switch {
	case len(body) > 0 && body[0] == '[':
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, nil, fmt.Errorf("body is not a JSON array of records: %w", err)
		}
		if len(raws) == 0 {
			return nil, nil, errors.New("empty array: send at least one record")
		}
		if len(raws) > MaxRecords {
			return nil, nil, fmt.Errorf("%d records, over the limit of %d per request", len(raws), MaxRecords)
		}
	case len(body) > 0 && body[0] == '{':
		raws = []json.RawMessage{body}
	default:
		return nil, nil, errors.New("body must be an app.record JSON object or an array of them")
	}
	now := h.now()
	recs := make([]*schema.AppRecord, 0, len(raws))
	var errs []fieldError
	for i, raw := range raws {
		rec := &schema.AppRecord{}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(rec); err != nil {
			errs = append(errs, fieldError{Index: i, Field: jsonField(err), Reason: err.Error()})
			continue
		}
		if rec.Schema == "" {
			rec.Schema = schema.KindAppRecord.SchemaID()
		}
		if rec.EventID == "" {
			rec.EventID = schema.NewEventID()
		}
		if rec.TS.IsZero() {
			rec.TS = now.UTC()
		}
		if err := rec.ValidateAt(now); err != nil {
			var ve schema.ValidationErrors
			if errors.As(err, &ve) {
				for _, fe := range ve {
					errs = append(errs, fieldError{Index: i, Field: fe.Field, Reason: fe.Reason})
				}
				continue
			}
			errs = append(errs, fieldError{Index: i, Reason: err.Error()})
			continue
		}
		recs = append(recs, rec)
	}
	return recs, errs, nil
}

// jsonField names the field of a JSON decoding error when it has one.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
		return strings.Trim(strings.TrimPrefix(s, "json: unknown field "), `"`)
	}
	return ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
