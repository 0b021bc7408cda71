package postmortem

import "testing"

// TestAllocationSites checks the catalogue against statements as vLLM's source writes them: the
// tensors each allocates, with the shape's columns and the element size its dtype has.
func TestAllocationSites(t *testing.T) {
	fp16 := dtypeInfo{"float16", 2, "model dtype"}
	type want struct {
		dtype   string
		bytes   int
		plusOne bool
	}
	for _, tc := range []struct {
		frame, code string
		dt          dtypeInfo
		want        []want
	}{
		{"vllm/model_executor/layers/utils.py:apply_penalties", "logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts", float32Logits, []want{{"float32", 4, false}}},
		{"vllm/model_executor/layers/utils.py:apply_penalties", "logits -= frequency_penalties.unsqueeze(dim=1) * output_bin_counts", fp16, []want{{"float16", 2, false}}},
		{"vllm/model_executor/layers/sampler.py:_apply_penalties", "logits -= frequency_penalties.unsqueeze_(dim=1) * output_bin_counts", fp16, []want{{"float16", 2, false}}},
		{"vllm/model_executor/layers/utils.py:apply_penalties", "logits -= presence_penalties.unsqueeze(dim=1) * output_mask", float32Logits, []want{{"float32", 4, false}}},
		{"vllm/model_executor/layers/utils.py:apply_penalties", "repetition_penalties = repetition_penalties.unsqueeze(dim=1).repeat(", float32Logits, []want{{"float32", 4, false}}},
		{"vllm/model_executor/layers/utils.py:apply_penalties", "logits[logits > 0] /= torch.where(prompt_mask | output_mask,", float32Logits, []want{{"bool", 1, false}, {"bool", 1, false}, {"float32", 4, false}}},
		{"vllm/model_executor/layers/utils.py:get_token_bin_counts_and_mask", "bin_counts = torch.zeros((num_seqs, vocab_size + 1),", float32Logits, []want{{"int64", 8, true}}},
		{"vllm/model_executor/layers/utils.py:get_token_bin_counts_and_mask", "mask = bin_counts > 0", float32Logits, []want{{"bool", 1, false}}},
		{"vllm/v1/sample/sampler.py:forward", "logits = logits.to(torch.float32)", fp16, []want{{"float32", 4, false}}},
		{"vllm/v1/sample/sampler.py:compute_logprobs", "return logits.log_softmax(dim=-1, dtype=torch.float32)", float32Logits, []want{{"float32", 4, false}}},
		{"vllm/v1/sample/ops/topk_topp_sampler.py:apply_top_k_top_p", "logits_sort, logits_idx = logits.sort(dim=-1, descending=False)", float32Logits, []want{{"float32", 4, false}, {"int64", 8, false}}},
		{"vllm/v1/sample/ops/topk_topp_sampler.py:random_sample", "q = torch.empty_like(probs)", float32Logits, []want{{"float32", 4, false}}},
		{"vllm/v1/sample/ops/topk_topp_sampler.py:apply_top_k_only", `logits.masked_fill_(logits < top_k_mask, -float("inf"))`, float32Logits, []want{{"bool", 1, false}}},
		{"vllm/v1/sample/ops/topk_topp_sampler.py:apply_top_k_top_p", "top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)", float32Logits, []want{{"bool", 1, false}}},
		{"vllm/v1/sample/ops/topk_topp_sampler.py:apply_top_k_top_p", "probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)", float32Logits, nil},
		{"vllm/v1/sample/ops/logprobs.py:batched_count_greater_than", "return (x >= values).sum(-1)", float32Logits, []want{{"bool", 1, false}}},
		{"vllm/model_executor/models/qwen2.py:forward", "gate_up, _ = self.gate_up_proj(x)", float32Logits, nil},
	} {
		got := allocationsAt(tc.frame, tc.code, tc.dt)
		if len(got) != len(tc.want) {
			t.Errorf("%s %q: %d tensors %+v, want %d", tc.frame, tc.code, len(got), got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if got[i].DType != w.dtype || got[i].ElementBytes != w.bytes || got[i].VocabPlusOne != w.plusOne {
				t.Errorf("%s %q tensor %d: %+v, want %+v", tc.frame, tc.code, i, got[i], w)
			}
		}
	}
}
