package security

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// echoLen reads the whole body and answers its length, or 413 when the limit stopped the read.
var echoLen = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	io.WriteString(w, strconv.FormatInt(n, 10))
})

func TestLimitBody(t *testing.T) {
	srv := httptest.NewServer(LimitBody(echoLen, 1024))
	defer srv.Close()
	tests := []struct {
		name    string
		size    int
		chunked bool
		status  int
		body    string
	}{
		{"empty", 0, false, http.StatusOK, "0"},
		{"at limit", 1024, false, http.StatusOK, "1024"},
		{"over limit with length", 1025, false, http.StatusRequestEntityTooLarge, "limit is 1024"},
		{"at limit chunked", 1024, true, http.StatusOK, "1024"},
		{"over limit chunked", 4096, true, http.StatusRequestEntityTooLarge, "request body too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(strings.Repeat("x", tc.size))
			if tc.chunked {
				// Hiding the length makes the client send chunked.
				body = io.MultiReader(body)
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(got), tc.body) {
				t.Fatalf("status %d body %q, want %d containing %q", resp.StatusCode, got, tc.status, tc.body)
			}
		})
	}
}

func TestLimitBodyRejectsNoLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("LimitBody(h, 0) did not panic")
		}
	}()
	LimitBody(echoLen, 0)
}
