package rag

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/servescope/servescope/schema"
)

// maxBody bounds request bodies of the demo's endpoints.
const maxBody = 64 << 10

// Handler serves POST /ask {"question": "..."} and, when adminToken is set,
// POST /admin/embedding-model {"version": "..."} with "Authorization: Bearer <adminToken>".
func (a *App) Handler(adminToken string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ask", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Question string `json:"question"`
		}
		if err := readJSON(w, r, &in); err != nil || strings.TrimSpace(in.Question) == "" {
			writeJSON(w, badBodyStatus(err), map[string]string{"error": "body must be {\"question\": \"...\"} under 64 KiB"})
			return
		}
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 128 {
			id = schema.NewRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		ans, err := a.Ask(r.Context(), id, in.Question)
		if err != nil {
			writeJSON(w, http.StatusBadGateway, map[string]any{"request_id": id, "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, ans)
	})
	mux.HandleFunc("GET /admin/embedding-model", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"query": a.QueryEmbeddingModel(), "index": a.index.EmbeddingModel, "index_version": a.index.Version})
	})
	mux.HandleFunc("POST /admin/embedding-model", func(w http.ResponseWriter, r *http.Request) {
		if adminToken == "" {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "admin endpoint disabled (set RAGDEMO_ADMIN_TOKEN)"})
			return
		}
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(adminToken)) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "bad or missing bearer token"})
			return
		}
		var in struct {
			Version string `json:"version"`
		}
		if err := readJSON(w, r, &in); err != nil || in.Version == "" || len(in.Version) > 128 {
			writeJSON(w, badBodyStatus(err), map[string]string{"error": "body must be {\"version\": \"...\"} under 64 KiB"})
			return
		}
		a.SetQueryEmbeddingModel(in.Version)
		writeJSON(w, http.StatusOK, map[string]string{"query": in.Version, "index": a.index.EmbeddingModel})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// readJSON reads the whole body (at most maxBody bytes) before decoding it, so that an oversize
// body is told apart from a malformed one whatever its first bytes are.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// badBodyStatus is 413 for a body over the limit and 400 for any other bad body.
func badBodyStatus(err error) int {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
