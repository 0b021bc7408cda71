package otlp

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// FuzzServeHTTP drives the OTLP/HTTP endpoint with arbitrary bodies in every accepted encoding
// (JSON or protobuf, plain or gzip): it never panics, answers a status from the protocol's set,
// and publishes only valid engine.span events.
func FuzzServeHTTP(f *testing.F) {
	js, err := os.ReadFile(filepath.Join("testdata", "vllm_llm_request.json"))
	if err != nil {
		f.Fatal(err)
	}
	proto, err := loadRequest(f).MarshalProto()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(js, true, false)
	f.Add(proto, false, false)
	f.Add(js, true, true)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"llm_request","attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"chatcmpl-x"}}]}]}]}]}`), true, false)
	f.Add([]byte{0x1f, 0x8b, 0x08}, false, true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON, gz bool) {
		c := &collected{}
		r, err := NewReceiver(c, Naming{Default: "e"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		payload := body
		if gz {
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			w.Write(body)
			w.Close()
			payload = b.Bytes()
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(payload))
		if isJSON {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/x-protobuf")
		}
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for a %d-byte body: %s", rec.Code, len(body), rec.Body.String())
		}
		for _, e := range c.all() {
			if e.RequestID == "" || e.Validate() != nil {
				t.Fatalf("invalid event published: %+v", e)
			}
		}
	})
}
