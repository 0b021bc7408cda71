package record

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/servescope/servescope/dev/benchcpu"
)

// The gateway reads every chunk of every stream (one per generated token) on the proxy's path.
// These benchmarks read the facts the observer takes from a chat or text completion chunk (id,
// model, each choice's index, text and finish reason, the usage counts and vLLM's timing object)
// on vLLM's own chunks with gjson, as the observer does, and with encoding/json into typed
// structs. TestChunkReadersAgree holds the two to the same facts, so the benchmarks compare the
// same work. Run them side by side with
//
//	go test -run '^$' -bench ChunkRead -benchmem ./services/gateway/record/

// chunkFacts are the facts read from one chunk.
type chunkFacts struct {
	id, model                    string
	choices                      []choiceFacts
	prompt, completion, cached   float64
	queueMS, ttftMS, generateMS  float64
	usage, metrics, hasRoleDelta bool
}

type choiceFacts struct {
	index        int
	text, finish string
}

// streamChunks returns the JSON of every data line of vLLM's chat and completion streams in
// testdata.
func streamChunks(tb testing.TB) [][]byte {
	var chunks [][]byte
	for _, name := range []string{"chat_stream.engine.sse", "chat_stream_cjk.sse", "completion_stream.engine.sse"} {
		for _, line := range bytes.Split(golden(tb, name), []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && len(data) > 0 && data[0] == '{' {
				chunks = append(chunks, data)
			}
		}
	}
	return chunks
}

func readChunkGJSON(b []byte) (f chunkFacts) {
	gjson.Parse(bstr(b)).ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "id":
			f.id = v.Str
		case "model":
			f.model = v.Str
		case "choices":
			v.ForEach(func(_, c gjson.Result) bool {
				var ch choiceFacts
				c.ForEach(func(k, cv gjson.Result) bool {
					switch k.Str {
					case "index":
						ch.index = int(cv.Int())
					case "finish_reason":
						ch.finish = cv.Str
					case "text":
						ch.text = cv.Str
					case "delta":
						cv.ForEach(func(dk, dv gjson.Result) bool {
							switch dk.Str {
							case "role":
								f.hasRoleDelta = dv.Type != gjson.Null
							case "content":
								ch.text = dv.Str
							}
							return true
						})
					}
					return true
				})
				f.choices = append(f.choices, ch)
				return true
			})
		case "usage":
			f.usage = v.IsObject()
			v.ForEach(func(k, uv gjson.Result) bool {
				switch k.Str {
				case "prompt_tokens":
					f.prompt = uv.Num
				case "completion_tokens":
					f.completion = uv.Num
				case "prompt_tokens_details":
					f.cached = uv.Get("cached_tokens").Num
				}
				return true
			})
		case "metrics":
			f.metrics = v.IsObject()
			v.ForEach(func(k, mv gjson.Result) bool {
				switch k.Str {
				case "queue_time_ms":
					f.queueMS = mv.Num
				case "time_to_first_token_ms":
					f.ttftMS = mv.Num
				case "generation_time_ms":
					f.generateMS = mv.Num
				}
				return true
			})
		}
		return true
	})
	return f
}

type stdChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         *string `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        *struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        float64 `json:"prompt_tokens"`
		CompletionTokens    float64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens float64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Metrics *struct {
		QueueTimeMS        float64 `json:"queue_time_ms"`
		TimeToFirstTokenMS float64 `json:"time_to_first_token_ms"`
		GenerationTimeMS   float64 `json:"generation_time_ms"`
	} `json:"metrics"`
}

func readChunkStd(b []byte) (f chunkFacts) {
	var c stdChunk
	if json.Unmarshal(b, &c) != nil {
		return f
	}
	f.id, f.model = c.ID, c.Model
	for _, ch := range c.Choices {
		cf := choiceFacts{index: ch.Index}
		if ch.Text != nil {
			cf.text = *ch.Text
		}
		if ch.FinishReason != nil {
			cf.finish = *ch.FinishReason
		}
		if ch.Delta != nil {
			f.hasRoleDelta = f.hasRoleDelta || ch.Delta.Role != nil
			if ch.Delta.Content != nil {
				cf.text = *ch.Delta.Content
			}
		}
		f.choices = append(f.choices, cf)
	}
	if u := c.Usage; u != nil {
		f.usage, f.prompt, f.completion = true, u.PromptTokens, u.CompletionTokens
		if u.PromptTokensDetails != nil {
			f.cached = u.PromptTokensDetails.CachedTokens
		}
	}
	if m := c.Metrics; m != nil {
		f.metrics, f.queueMS, f.ttftMS, f.generateMS = true, m.QueueTimeMS, m.TimeToFirstTokenMS, m.GenerationTimeMS
	}
	return f
}

var chunkReaders = []struct {
	name string
	read func([]byte) chunkFacts
}{
	{"gjson", readChunkGJSON},
	{"encoding_json", readChunkStd},
}

func TestChunkReadersAgree(t *testing.T) {
	chunks := streamChunks(t)
	if len(chunks) < 10 {
		t.Fatalf("%d chunks in testdata, want the three streams' chunks", len(chunks))
	}
	for _, c := range chunks {
		want := readChunkGJSON(c)
		if want.id == "" || want.model == "" || len(want.choices) == 0 && !want.usage {
			t.Fatalf("gjson read neither id, model, choices nor usage from %s", c)
		}
		for _, r := range chunkReaders[1:] {
			if got := r.read(c); !reflect.DeepEqual(got, want) {
				t.Errorf("%s read %+v, gjson %+v\nchunk %s", r.name, got, want, c)
			}
		}
	}
}

// BenchmarkChunkRead reads every chunk of the three streams once per iteration.
func BenchmarkChunkRead(b *testing.B) {
	chunks := streamChunks(b)
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	for _, r := range chunkReaders {
		b.Run(r.name, func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			stop := benchcpu.Start(b)
			for b.Loop() {
				for _, c := range chunks {
					r.read(c)
				}
			}
			stop()
		})
	}
}
