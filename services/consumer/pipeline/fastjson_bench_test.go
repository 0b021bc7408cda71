package pipeline

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/servescope/servescope/dev/benchcpu"
	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/schema"
)

// scanFlatObjectGJSON is scanFlatObject on gjson: the same members handed to set, the same
// refusals (malformed JSON, escapes, null, objects, arrays of other than plain strings).
func scanFlatObjectGJSON(text string, set func(key string, v jsonValue) bool) bool {
	if !gjson.Valid(text) {
		return false
	}
	root := gjson.Parse(text)
	if !root.IsObject() {
		return false
	}
	ok := true
	root.ForEach(func(k, v gjson.Result) bool {
		if strings.IndexByte(k.Raw, '\\') >= 0 {
			ok = false
			return false
		}
		jv := jsonValue{raw: v.Raw}
		switch v.Type {
		case gjson.String:
			if strings.IndexByte(v.Raw, '\\') >= 0 {
				ok = false
				return false
			}
			jv.typ, jv.s = '"', v.Raw[1:len(v.Raw)-1]
		case gjson.Number:
			jv.typ, jv.s = 'n', v.Raw
		case gjson.True:
			jv.typ = 't'
		case gjson.False:
			jv.typ = 'f'
		case gjson.JSON:
			if !v.IsArray() {
				ok = false
				return false
			}
			jv.typ, jv.items = '[', []string{}
			v.ForEach(func(_, item gjson.Result) bool {
				if item.Type != gjson.String || strings.IndexByte(item.Raw, '\\') >= 0 {
					ok = false
					return false
				}
				jv.items = append(jv.items, item.Raw[1:len(item.Raw)-1])
				return true
			})
			if !ok {
				return false
			}
		default:
			ok = false
			return false
		}
		if !set(k.Raw[1:len(k.Raw)-1], jv) {
			ok = false
			return false
		}
		return true
	})
	return ok
}

func gatewayEvents() (finished, started []byte) {
	ts := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	e := eventgen.RequestFinished(1, ts)
	e.FinishReasons = []string{"stop"}
	e.ResponseID = "chatcmpl-req-1"
	e.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	return eventgen.Encode(e), eventgen.Encode(eventgen.Event(schema.KindRequestStarted, 1, ts))
}

func TestFlatScannersAgree(t *testing.T) {
	finished, started := gatewayEvents()
	a, okA := readRequestFinished(string(finished), scanFlatObject)
	b, okB := readRequestFinished(string(finished), scanFlatObjectGJSON)
	if !okA || !okB || !reflect.DeepEqual(a, b) {
		t.Fatalf("request.finished: hand-written %v %+v, gjson %v %+v", okA, a, okB, b)
	}
	c, okC := readRequestStarted(string(started), scanFlatObject)
	d, okD := readRequestStarted(string(started), scanFlatObjectGJSON)
	if !okC || !okD || !reflect.DeepEqual(c, d) {
		t.Fatalf("request.started: hand-written %v %+v, gjson %v %+v", okC, c, okD, d)
	}
}

func BenchmarkFlatDecode(b *testing.B) {
	finished, started := gatewayEvents()
	for _, ev := range []struct {
		name string
		data []byte
		read func(string, flatScanner) (schema.Event, bool)
		std  func() schema.Event
	}{
		{"request.finished", finished,
			func(s string, f flatScanner) (schema.Event, bool) { return readRequestFinished(s, f) },
			func() schema.Event { return &schema.RequestFinished{} }},
		{"request.started", started,
			func(s string, f flatScanner) (schema.Event, bool) { return readRequestStarted(s, f) },
			func() schema.Event { return &schema.RequestStarted{} }},
	} {
		text := string(ev.data)
		for _, sc := range []struct {
			name string
			scan flatScanner
		}{{"handwritten", scanFlatObject}, {"gjson", scanFlatObjectGJSON}} {
			b.Run(ev.name+"/"+sc.name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				stop := benchcpu.Start(b)
				for b.Loop() {
					if _, ok := ev.read(text, sc.scan); !ok {
						b.Fatal("refused")
					}
				}
				stop()
			})
		}
		b.Run(ev.name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			for b.Loop() {
				if err := json.Unmarshal(ev.data, ev.std()); err != nil {
					b.Fatal(err)
				}
			}
			stop()
		})
	}
}
