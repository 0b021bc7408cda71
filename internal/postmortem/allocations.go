package postmortem

import "strings"

// Element sizes of the dtypes the sampler's tensors use.
const (
	bytesFloat32 = 4
	bytesInt64   = 8
	bytesBool    = 1
)

// Allocation is one tensor that a statement of vLLM's sampler or penalty code allocates, with
// the shape and dtype the source gives it. A statement that allocates several tensors (a sort's
// values and indices, a mask and a torch.where) has one Allocation each: PyTorch's message does
// not say which of them failed, the arithmetic tries each.
type Allocation struct {
	// Tensor names the tensor as the source writes it.
	Tensor string `json:"tensor"`
	// Shape is its shape in the source's terms; rows are the sequences being sampled (num_seqs),
	// columns the vocabulary (VocabPlusOne: vocab_size + 1, the bin counts' padding column).
	Shape        string `json:"shape"`
	VocabPlusOne bool   `json:"vocab_plus_one,omitempty"`
	// DType is the element type ("float32", "int64", "bool", or the logits' own dtype, "float16"
	// for instance, where the tensor inherits it); ElementBytes its size.
	DType        string `json:"dtype"`
	ElementBytes int    `json:"element_bytes"`
	// Why says where the shape and dtype come from.
	Why string `json:"why"`
}

// site is a statement of vLLM's code identified by its function and a piece of its source line.
type site struct {
	funcs []string // function names (the frame's "in f"); empty: any
	code  string   // pieces of the source line Python printed under the frame, "|"-separated, all present
	// allocs builds the statement's tensors; logits is the logits' dtype at that point.
	allocs func(logits dtypeInfo) []Allocation
}

// dtypeInfo is the logits' dtype where a statement runs, and why it is that.
type dtypeInfo struct {
	name  string
	bytes int
	why   string
}

func logitsSized(tensor, why string, dt dtypeInfo) Allocation {
	return Allocation{Tensor: tensor, Shape: "(num_seqs, vocab_size)", DType: dt.name, ElementBytes: dt.bytes, Why: why + "; " + dt.why}
}

func fixed(tensor, shape string, plusOne bool, dtype string, size int, why string) Allocation {
	return Allocation{Tensor: tensor, Shape: shape, VocabPlusOne: plusOne, DType: dtype, ElementBytes: size, Why: why}
}

var float32Logits = dtypeInfo{"float32", bytesFloat32, "float32"}

// sites is the catalogue of the sampler's and the penalties' allocations of logits-sized tensors,
// read from vLLM's source:
//   - vllm/model_executor/layers/utils.py apply_penalties and get_token_bin_counts_and_mask
//     (called through vllm/v1/sample/ops/penalties.py apply_all_penalties in V1, directly by V0's
//     vllm/model_executor/layers/sampler.py);
//   - vllm/v1/sample/sampler.py (forward's float32 cast, compute_logprobs) and
//     vllm/v1/sample/ops/topk_topp_sampler.py (apply_top_k_top_p's sort, masks and scatter,
//     apply_top_k_only's mask, the float32 softmax, random_sample's noise);
//   - V0's vllm/model_executor/layers/sampler.py (its float cast, softmax, log_softmax, sort).
//
// Multiplying a float tensor by an int64 or bool one gives the float's dtype (PyTorch's type
// promotion), so the penalty products have the logits' dtype: float32 in V1 since 0.8 (the
// sampler casts the logits first), the model's dtype in V0 (penalties run before the cast).
var sites = []site{
	{funcs: []string{"apply_penalties", "_apply_penalties"}, code: "frequency_penalties.unsqueeze|* output_bin_counts", allocs: func(dt dtypeInfo) []Allocation {
		return []Allocation{logitsSized("frequency_penalties.unsqueeze(dim=1) * output_bin_counts",
			"a (num_seqs, 1) penalty times the (num_seqs, vocab_size) int64 bin counts, promoted to the penalty's dtype", dt)}
	}},
	{funcs: []string{"apply_penalties", "_apply_penalties"}, code: "presence_penalties.unsqueeze|* output_mask", allocs: func(dt dtypeInfo) []Allocation {
		return []Allocation{logitsSized("presence_penalties.unsqueeze(dim=1) * output_mask",
			"a (num_seqs, 1) penalty times the (num_seqs, vocab_size) bool mask, promoted to the penalty's dtype", dt)}
	}},
	{funcs: []string{"apply_penalties", "_apply_penalties"}, code: "repetition_penalties.unsqueeze(dim=1).repeat(", allocs: func(dt dtypeInfo) []Allocation {
		return []Allocation{logitsSized("repetition_penalties.unsqueeze(dim=1).repeat(1, vocab_size)", "the penalty repeated over the vocabulary", dt)}
	}},
	{funcs: []string{"apply_penalties", "_apply_penalties"}, code: "torch.where(prompt_mask | output_mask", allocs: func(dt dtypeInfo) []Allocation {
		return []Allocation{
			fixed("logits > 0 (or <= 0)", "(num_seqs, vocab_size)", false, "bool", bytesBool, "a comparison's mask"),
			fixed("prompt_mask | output_mask", "(num_seqs, vocab_size)", false, "bool", bytesBool, "the union of two bool masks"),
			logitsSized("torch.where(prompt_mask | output_mask, repetition_penalties, 1.0)", "the penalties spread over the vocabulary", dt),
		}
	}},
	{funcs: []string{"get_token_bin_counts_and_mask", "_get_bin_counts_and_mask"}, code: "torch.zeros(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("bin_counts = torch.zeros((num_seqs, vocab_size + 1), dtype=torch.long)", "(num_seqs, vocab_size + 1)", true, "int64", bytesInt64,
			"torch.long bin counts with one padding column")}
	}},
	{funcs: []string{"get_token_bin_counts_and_mask", "_get_bin_counts_and_mask"}, code: "bin_counts > 0", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("mask = bin_counts > 0", "(num_seqs, vocab_size)", false, "bool", bytesBool, "a comparison's mask")}
	}},
	{funcs: []string{"forward"}, code: "logits.to(torch.float32)", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits.to(torch.float32)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "the V1 sampler's float32 copy of the model's logits")}
	}},
	{funcs: []string{"forward"}, code: "logits.to(torch.float)", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits.to(torch.float)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "the V0 sampler's float32 copy of the logits")}
	}},
	{funcs: []string{"forward"}, code: "logits.clone()", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits.clone()", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "a copy of the float32 logits for raw logprobs")}
	}},
	{funcs: []string{"compute_logprobs"}, allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits.log_softmax(dim=-1, dtype=torch.float32)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "log-probabilities in float32")}
	}},
	{code: "log_softmax(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("log_softmax(logits, dtype=torch.float)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "log-probabilities in float32")}
	}},
	{code: "softmax(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("softmax(logits, dtype=torch.float32)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "probabilities in float32")}
	}},
	{code: ".sort(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{
			fixed("logits_sort (values of logits.sort)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "the sorted float32 logits"),
			fixed("logits_idx (indices of logits.sort)", "(num_seqs, vocab_size)", false, "int64", bytesInt64, "sort's int64 indices"),
		}
	}},
	{code: "torch.empty_like(probs)", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("q = torch.empty_like(probs)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "exponential noise shaped like the float32 probabilities")}
	}},
	{code: ".scatter(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "the float32 logits put back in vocabulary order")}
	}},
	// Newer releases write the cumulative sum in place (torch.cumsum(..., out=probs_sort)).
	{code: "probs_sort.cumsum(", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("probs_sort.cumsum(dim=-1)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32, "cumulative float32 probabilities")}
	}},
	{code: " < top_k_mask", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("logits < top_k_mask", "(num_seqs, vocab_size)", false, "bool", bytesBool, "the top-k comparison's mask")}
	}},
	{code: "probs_sum <= 1 - p", allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("probs_sum <= 1 - p.unsqueeze(dim=1)", "(num_seqs, vocab_size)", false, "bool", bytesBool, "the top-p comparison's mask")}
	}},
	{funcs: []string{"batched_count_greater_than"}, allocs: func(dtypeInfo) []Allocation {
		return []Allocation{fixed("x >= values", "(num_seqs, vocab_size)", false, "bool", bytesBool, "a comparison's mask over the logprobs")}
	}},
}

// genericLogits is the reading when no frame names the statement: a float32 temporary the size
// of the logits, the sampler's most common allocation.
func genericLogits() []Allocation {
	return []Allocation{fixed("a logits-sized temporary (no frame names the statement)", "(num_seqs, vocab_size)", false, "float32", bytesFloat32,
		"assumed: the V1 sampler works on float32 logits")}
}

// allocationsAt returns the tensors the innermost frame's statement allocates, most specific
// site first; nil when the statement is not in the catalogue.
func allocationsAt(frame, code string, dt dtypeInfo) []Allocation {
	fn := frame[strings.LastIndex(frame, ":")+1:]
	for _, s := range sites {
		if s.code != "" && !containsAll(code, strings.Split(s.code, "|")) {
			continue
		}
		if len(s.funcs) > 0 && !contains(s.funcs, fn) {
			continue
		}
		if s.code == "" && len(s.funcs) == 0 {
			continue
		}
		return s.allocs(dt)
	}
	return nil
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
