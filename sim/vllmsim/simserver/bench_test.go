package simserver

import "testing"

// BenchmarkTokenChunk is the streaming hot path: one content chunk per token per running
// sequence (256 of them in the overload scenario).
func BenchmarkTokenChunk(b *testing.B) {
	for _, ep := range []endpoint{chatEP, completionEP} {
		s := &Server{}
		c := &call{ep: ep, id: "chatcmpl-2c1f3b9a8d7e4f60a1b2c3d4e5f60718", model: "servescope/sim-7b", created: 1796154344, prompts: [][]int{make([]int, 44)}, n: 1}
		ch := &child{}
		e := &enc{}
		b.Run(map[endpoint]string{chatEP: "chat", completionEP: "completion"}[ep], func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				s.tokenChunk(e, c, ch, " token", "")
			}
		})
	}
}
