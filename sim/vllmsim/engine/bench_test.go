package engine

import (
	"context"
	"sync"
	"testing"
)

// BenchmarkFullBatch measures the engine's own cost of generating for a full batch (256 running
// sequences of 128 tokens, the overload scenario's steady state) with the clock scaled so that
// sleeps vanish: what remains is scheduling, KV accounting and token delivery to 256 readers.
func BenchmarkFullBatch(b *testing.B) {
	tok := NewTokenizer(152064)
	p := tok.Encode(ApplyChatTemplate([]ChatMessage{{Role: "user", Content: "A short question about serving systems and batching."}}, true), true)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e := New(DefaultConfig(), tok, NewClock(1e9))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = e.Run(ctx)
		}()
		var wg sync.WaitGroup
		for j := 0; j < 256; j++ {
			s, err := e.Submit(Request{ID: "b", PromptIDs: append([]int{j}, p...), MaxTokens: 128, IgnoreEOS: true})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]Token, 0, 16)
				for {
					_, _, done, err := s.Wait(ctx, buf[:0])
					if done || err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		<-done
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*256*128), "ns/token")
}
