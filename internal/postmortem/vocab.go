package postmortem

import (
	"regexp"
	"strings"
)

// DefaultVocabSize is Qwen2.5-7B's vocabulary (config.json vocab_size, the logits' width), the
// model of the measurements servescope is calibrated on (docs/measurements.md), used when neither
// --vocab-size nor a known model name gives one.
const DefaultVocabSize = 152064

// knownVocab maps model-name patterns (case-insensitive, matched against the model id, e.g.
// "Qwen/Qwen2.5-7B-Instruct-AWQ") to config.json's vocab_size, which is the logits' width.
// More specific patterns come first.
var knownVocab = []struct {
	re    *regexp.Regexp
	vocab int
}{
	{regexp.MustCompile(`(?i)qwen2(\.5)?-(0\.5|1\.5|3)b`), 151936},
	{regexp.MustCompile(`(?i)qwen2(\.5)?-`), 152064},
	{regexp.MustCompile(`(?i)qwen3`), 151936},
	{regexp.MustCompile(`(?i)llama-?3`), 128256},
	{regexp.MustCompile(`(?i)llama-?2`), 32000},
	{regexp.MustCompile(`(?i)mistral-7b.*v0\.3`), 32768},
	{regexp.MustCompile(`(?i)(mistral-7b|mixtral-8x7b)`), 32000},
	{regexp.MustCompile(`(?i)gemma-2`), 256000},
	{regexp.MustCompile(`(?i)phi-3-mini`), 32064},
}

// Vocab sources, as the report names them.
const (
	VocabFromFlag    = "--vocab-size"
	VocabFromModel   = "known model"
	VocabFromDefault = "the default, Qwen2.5-7B's"
)

// VocabSize picks the vocabulary size: the flag when set, the table entry for model when known,
// DefaultVocabSize otherwise; source says which.
func VocabSize(flag int, model string) (vocab int, source string) {
	if flag > 0 {
		return flag, VocabFromFlag
	}
	if model != "" {
		for _, k := range knownVocab {
			if k.re.MatchString(model) {
				return k.vocab, VocabFromModel + " " + model
			}
		}
	}
	return DefaultVocabSize, VocabFromDefault
}

// Engine settings that vLLM logs at start: V1's "non-default args: {'model': '...', ...}", V0's
// "args: Namespace(model='...', ...)" and both releases' "Initializing ... engine ... with config:
// model='...', ..., dtype=torch.float16, ...".
var (
	modelRE     = regexp.MustCompile(`(?:'model': '|model=')([^']+)'`)
	gpuUtilRE   = regexp.MustCompile(`(?:'gpu_memory_utilization': |gpu_memory_utilization=)([0-9.]+)`)
	maxSeqsRE   = regexp.MustCompile(`(?:'max_num_seqs': |max_num_seqs=)([0-9]+)`)
	dtypeRE     = regexp.MustCompile(`(?:\bdtype=torch\.|'dtype': ')(float16|bfloat16|float32|half|float)\b`)
	modelArgsRE = regexp.MustCompile(`non-default args|args: Namespace\(|Initializing an? (?:LLM|V1 LLM) engine`)
)

// settings are the engine settings one start-up line gives.
type settings struct {
	model, gpuUtil, maxSeqs, dtype string
}

// engineSettings reads the model, gpu_memory_utilization, max_num_seqs and the model's dtype
// from a start-up line.
func engineSettings(msg string) settings {
	var s settings
	if !modelArgsRE.MatchString(msg) {
		return s
	}
	if m := modelRE.FindStringSubmatch(msg); m != nil {
		s.model = strings.TrimSpace(m[1])
	}
	if m := gpuUtilRE.FindStringSubmatch(msg); m != nil {
		s.gpuUtil = m[1]
	}
	if m := maxSeqsRE.FindStringSubmatch(msg); m != nil {
		s.maxSeqs = m[1]
	}
	if m := dtypeRE.FindStringSubmatch(msg); m != nil {
		switch m[1] {
		case "half":
			s.dtype = "float16"
		case "float":
			s.dtype = "float32"
		default:
			s.dtype = m[1]
		}
	}
	return s
}

// MaxNumSeqs is the slot limit (vLLM's max_num_seqs) a start-up line of the engine's log gives, ""
// when the line is no start-up line or names none.
func MaxNumSeqs(message string) string { return engineSettings(message).maxSeqs }
