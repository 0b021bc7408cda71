package apptrace

import (
	"encoding/binary"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/otlp"
)

// validated drops the records it gets after validating them, as the publisher would.
type validated struct{ n int }

func (v *validated) Publish(e schema.Event) error {
	v.n++
	return e.Validate()
}

// BenchmarkConsume runs every instrumentation shape (as the Go SDK exports them) through the
// Assembler, each iteration with fresh trace ids, and reports spans per second of one core.
// The whole path through the receiver, JetStream and the memory bound under load is
// scripts/bench collector.
func BenchmarkConsume(b *testing.B) {
	td := ptrace.NewTraces()
	for _, e := range sdkExports(b) {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalJSON(e); err != nil {
			b.Fatal(err)
		}
		req.Traces().ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
	}
	spans := td.SpanCount()
	pub := &validated{}
	asm, err := NewAssembler(Config{}, pub, quiet(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rss := td.ResourceSpans()
		for r := 0; r < rss.Len(); r++ {
			sss := rss.At(r).ScopeSpans()
			for s := 0; s < sss.Len(); s++ {
				ss := sss.At(s).Spans()
				for k := 0; k < ss.Len(); k++ {
					id := ss.At(k).TraceID()
					binary.LittleEndian.PutUint64(id[8:], uint64(i))
					ss.At(k).SetTraceID(id)
				}
			}
		}
		asm.Consume(td, otlp.IsRequestSpan)
	}
	b.StopTimer()
	asm.Close()
	b.ReportMetric(float64(spans)*float64(b.N)/b.Elapsed().Seconds(), "spans/s")
	if pub.n == 0 {
		b.Fatal("no record published")
	}
}
