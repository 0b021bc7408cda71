package server

import "testing"

// TestTemplatesParse renders nothing but catches html/template's context errors at test time
// rather than on a viewer's first page.
func TestTemplatesParse(t *testing.T) {
	p, err := newPages()
	if err != nil {
		t.Fatal(err)
	}
	for name, tpl := range p.t {
		var b nopWriter
		if err := tpl.ExecuteTemplate(&b, "base", pageData{Title: name, Nav: name, Complaints: Complaints, Complaint: &Complaints[0], Presets: []string{"1h"}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
