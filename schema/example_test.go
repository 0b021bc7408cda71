package schema_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/servescope/servescope/schema"
)

// An application builds one app.record per user request, after it has answered, and publishes
// the encoded event on the kind's subject with the event_id as Nats-Msg-Id.
func ExampleNewAppRecord() {
	answered := time.Date(2026, 6, 1, 11, 59, 30, 0, time.UTC)
	// The request_id is the X-Request-Id the application sent through the gateway, so the record
	// joins the gateway's request.finished event.
	r := schema.NewAppRecord("req-7f3a", "support-bot", answered)
	// NewAppRecord sets a fresh KSUID; it is fixed here only so that the output is reproducible.
	r.EventID = "2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA"
	r.PromptVersion = "prompt-v12"
	r.IndexVersion = "faiss-idx-41"
	r.Model = "Qwen/Qwen2.5-0.5B-Instruct"
	r.SetPassages([]schema.Passage{
		{ID: "doc-17#p3", Score: 0.83},
		{ID: "doc-4#p1", Score: 0.91, Source: "kb/shipping.md"},
	})
	retrieval := 0.084
	r.RetrievalSeconds = &retrieval
	hit := false
	r.CacheHit = &hit

	b, err := schema.Encode(r) // validates first: nothing invalid is ever published
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(schema.Subject(r.Kind()))
	fmt.Println("Nats-Msg-Id:", schema.MsgID(r))
	fmt.Println(string(b))
	// Output:
	// servescope.v1.app.record
	// Nats-Msg-Id: 2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA
	// {"schema":"app.record/v1","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA","request_id":"req-7f3a","ts":"2026-06-01T11:59:30Z","app":"support-bot","prompt_version":"prompt-v12","index_version":"faiss-idx-41","model":"Qwen/Qwen2.5-0.5B-Instruct","passages":[{"id":"doc-17#p3","score":0.83},{"id":"doc-4#p1","score":0.91,"source":"kb/shipping.md"}],"retrieval_top_score":0.91,"retrieval_s":0.084,"cache_hit":false}
}

// Validate names every bad field, by its JSON name, so the application can log exactly what to fix.
func ExampleAppRecord_Validate() {
	r := schema.NewAppRecord("", "support-bot", time.Date(2026, 6, 1, 11, 59, 30, 0, time.UTC))
	negative := -0.2
	r.RetrievalSeconds = &negative
	r.SetPassages([]schema.Passage{{ID: "doc-1", Score: 0.5}, {Score: 0.4}})
	r.ErrorMessage = schema.Truncate(strings.Repeat("timeout; ", 2000), 8<<10) // keep free text within its limit

	var fields schema.ValidationErrors
	if errors.As(r.Validate(), &fields) {
		for _, f := range fields {
			fmt.Printf("%s: %s\n", f.Field, f.Reason)
		}
	}
	// Output:
	// request_id: missing
	// passages[1].id: missing
	// retrieval_s: negative duration -0.2
}

// A consumer decodes each message by its subject; what cannot be stored comes back as an error
// that says why, for the dead-letter stream.
func ExampleDecode() {
	subject := "servescope.v1.app.record"
	msgs := []string{
		`{"schema":"app.record/v1","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bA","request_id":"req-7f3a","ts":"2026-06-01T11:59:30Z","cache_hit":true,"cache_kind":"semantic"}`,
		`{"schema":"app.record/v2","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bB","request_id":"req-7f3b","ts":"2026-06-01T11:59:31Z"}`,
		`{"schema":"app.record/v1","event_id":"2Iq3zfE8Fh6hvZ2gwA9eWl0j5bC","ts":"2026-06-01T11:59:32Z","retrieval_s":-1}`,
		`{"schema":"app.record/v1",`,
	}
	for _, m := range msgs {
		e, err := schema.Decode(subject, []byte(m))
		if err != nil {
			fmt.Println("dead letter:", err)
			continue
		}
		r := e.(*schema.AppRecord)
		fmt.Println(r.Kind(), r.RequestID, *r.CacheHit, r.CacheKind)
	}
	// Output:
	// app.record req-7f3a true semantic
	// dead letter: invalid event: schema: unknown schema version "v2" (this consumer reads v1)
	// dead letter: invalid event: request_id: missing; retrieval_s: negative duration -1
	// dead letter: invalid_json: unexpected end of JSON input
}

func ExampleKindFromSubject() {
	for _, s := range []string{"servescope.v1.request.finished", "it-4f2a.v1.engine.log", "servescope.dlq.app.record"} {
		k, err := schema.KindFromSubject(s)
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "request.finished" <nil>
	// "engine.log" <nil>
	// "" subject "servescope.dlq.app.record": not a servescope v1 subject (want <prefix>.v1.<kind>)
}

func ExampleTruncate() {
	fmt.Println(schema.Truncate("naïve", 3)) // "ï" is two bytes; cutting inside it drops it
	// Output: na
}
