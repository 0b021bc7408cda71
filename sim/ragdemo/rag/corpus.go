package rag

// Passage is one document chunk of the built-in corpus.
type Passage struct {
	ID    string
	Title string
	Text  string
}

// Corpus returns the demo's small built-in corpus: short notes on running an LLM serving stack,
// each paired with a question in [Questions] that it answers.
func Corpus() []Passage {
	return []Passage{
		{"kv-cache-01", "KV cache", "The KV cache stores the attention keys and values of every running sequence so the engine does not recompute them at each decode step; its usage grows with the tokens held by running requests."},
		{"queue-01", "Queue wait", "Queue wait is the time a request spends waiting for a free slot before prefill starts; it stays at zero until the engine runs out of slots or KV blocks, then grows with the excess load."},
		{"prefill-01", "Prefill", "Prefill processes the whole prompt in one forward pass and writes its keys and values into the KV cache; its cost grows with the number of uncached prompt tokens."},
		{"prefix-01", "Prefix caching", "Prefix caching reuses the KV blocks of a prompt prefix that an earlier request already computed, so a repeated long system prompt costs almost no prefill time."},
		{"decode-01", "Decode step", "Each decode step generates one token for every running sequence; while the batch is small the step is bound by memory bandwidth and its time stays flat."},
		{"batch-01", "Batch contention", "When the running batch grows beyond the bandwidth bound regime, every decode step slows down and the time between two tokens rises for all users at once."},
		{"slots-01", "Slot limit", "The max_num_seqs setting caps how many sequences run at once; at 256 running the engine stops admitting work and new requests wait in the queue."},
		{"ttft-01", "Time to first token", "Time to first token counts from the arrival of the request and therefore already contains both the queue wait and the prefill time."},
		{"tpot-01", "Time per output token", "Time per output token is the mean interval between generated tokens after the first one, computed as decode time divided by output tokens minus one."},
		{"e2e-01", "End to end latency", "End to end latency is queue wait plus prefill plus decode; a long answer with many output tokens has a high end to end latency even on a healthy engine."},
		{"length-01", "Stop reason length", "A finish reason of length means generation stopped at max_tokens; a rising share of length stops points at answers that are cut off."},
		{"oom-01", "Out of memory", "A CUDA out of memory error in the sampler while applying penalties allocates a tensor of running sequences times vocabulary size times four bytes."},
		{"memutil-01", "GPU memory utilization", "Lowering gpu memory utilization leaves more memory outside the engine budget for temporary activations, which prevents the sampler from running out of memory."},
		{"metrics-01", "Engine metrics", "The engine exposes cumulative histograms on its metrics endpoint; read them at the start and end of a window and take the difference to get that window's averages."},
		{"gauges-01", "Instantaneous gauges", "Running, waiting and KV cache usage are instantaneous gauges that must be sampled continuously because a single late reading shows nothing."},
		{"retrieval-01", "Retrieval score", "The score of the top retrieved passage is the direct sign of a retrieval incident; when the embedding model changes the top score collapses toward random."},
		{"embedding-01", "Embedding versions", "Queries and the index must be embedded by the same embedding model version; mixing versions silently returns unrelated passages with low similarity."},
		{"language-01", "Wrong language output", "An output check that counts letters outside the allowed scripts catches answers mixed with Chinese characters that no engine metric can see."},
		{"errors-01", "Error codes", "A 400 error is the input limit doing its job when a prompt exceeds the maximum context length, while a 500 error means the engine failed."},
		{"unfinished-01", "Unfinished requests", "Requests started but not finished that rise across several consecutive windows show a system that admits more work than it completes."},
		{"baseline-01", "Baselines", "Alert thresholds should be set relative to a normal day of the same system rather than to numbers from a book, because normal depends on the workload."},
		{"cache-01", "Answer cache", "An answer cache returns a stored answer for an identical question, so a cache hit needs no retrieval and no generation at all."},
		{"tokens-01", "Token counts", "Token counts are a stable signature of a workload while timings depend on context such as the prefix cache and the concurrent load."},
		{"crash-01", "Crash logs", "The engine log keeps the running count, the KV usage and the bytes requested at the moment of a crash, so it must be shipped before the process dies."},
	}
}

// Questions returns one question per corpus passage, worded close to it, keyed by passage id.
func Questions() map[string]string {
	return map[string]string{
		"kv-cache-01":   "What does the KV cache store for every running sequence at each decode step?",
		"queue-01":      "Why does queue wait stay at zero until the engine runs out of slots?",
		"prefill-01":    "How does prefill cost grow with the number of uncached prompt tokens?",
		"prefix-01":     "Why does a repeated long system prompt cost almost no prefill time with prefix caching?",
		"decode-01":     "Why does the decode step time stay flat while the batch is small?",
		"batch-01":      "Why does the time between two tokens rise when the running batch grows?",
		"slots-01":      "What happens when max_num_seqs caps the running sequences at 256?",
		"ttft-01":       "Does time to first token contain the queue wait and the prefill time?",
		"tpot-01":       "How is time per output token computed from decode time and output tokens?",
		"e2e-01":        "Why does a long answer with many output tokens have a high end to end latency?",
		"length-01":     "What does a finish reason of length mean for answers cut off at max_tokens?",
		"oom-01":        "Why does a CUDA out of memory error in the sampler allocate running sequences times vocabulary size times four bytes?",
		"memutil-01":    "How does lowering gpu memory utilization prevent the sampler from running out of memory?",
		"metrics-01":    "How do you get a window's averages from the engine's cumulative histograms?",
		"gauges-01":     "Why must running, waiting and KV cache usage gauges be sampled continuously?",
		"retrieval-01":  "Why is the score of the top retrieved passage the direct sign of a retrieval incident?",
		"embedding-01":  "What happens when queries and the index are embedded by different embedding model versions?",
		"language-01":   "How does an output check catch answers mixed with Chinese characters?",
		"errors-01":     "What is the difference between a 400 error and a 500 error from the engine?",
		"unfinished-01": "What do unfinished requests rising across consecutive windows show?",
		"baseline-01":   "Why should alert thresholds be set relative to a normal day of the same system?",
		"cache-01":      "Why does an answer cache hit need no retrieval and no generation?",
		"tokens-01":     "Why are token counts a stable signature of a workload while timings depend on context?",
		"crash-01":      "Why must the engine log with the running count and KV usage be shipped before a crash?",
	}
}
