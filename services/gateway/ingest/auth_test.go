package ingest

import (
	"net/http/httptest"
	"testing"
)

func TestAuthorized(t *testing.T) {
	h := New("s3cret", 1<<10, nil, nil)
	for header, want := range map[string]bool{
		"Bearer s3cret":  true,
		"bearer s3cret":  true,
		"BEARER  s3cret": true,
		"Bearer wrong":   false,
		"Basic s3cret":   false,
		"s3cret":         false,
		"":               false,
		"Bearer ":        false,
	} {
		r := httptest.NewRequest("POST", "/servescope/v1/records", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if got := h.authorized(r); got != want {
			t.Errorf("Authorization %q: authorized = %v, want %v", header, got, want)
		}
	}
}
