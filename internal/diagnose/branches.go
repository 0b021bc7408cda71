package diagnose

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/baseline"
)

// Branch IDs, in the order the diagnosis walks them (docs/measurements.md, From symptom to
// quantity).
const (
	BranchQueueOverload        = "queue_overload"
	BranchKVPressure           = "kv_pressure"
	BranchUnfinished           = "unfinished_requests"
	BranchLongPrompt           = "long_prompt"
	BranchLongOutput           = "long_output"
	BranchGenerationContention = "generation_contention"
	BranchRetrieval            = "retrieval_drift"
	BranchWrongLanguage        = "wrong_language"
	BranchEngineCrash          = "engine_crash"
)

// BranchOrder is the order the branches are walked and printed in.
var BranchOrder = []string{BranchQueueOverload, BranchKVPressure, BranchUnfinished, BranchLongPrompt, BranchLongOutput,
	BranchGenerationContention, BranchRetrieval, BranchWrongLanguage, BranchEngineCrash}

// Branch statuses.
const (
	StatusFinding = "finding" // the signature is there; Conclusion says what it points to
	// StatusClear: the quantities were recorded and show no signature, over the whole range, in
	// every window of the branch's resolution, and no alert of the branch's rules fired.
	StatusClear  = "clear"
	StatusNoData = "no data" // the quantities this branch needs were not recorded
	// StatusCannotTell: the window's quantities were recorded, but the data cannot decide (no
	// baseline of a quantity that has no absolute floor).
	StatusCannotTell = "cannot tell"
)

// Thresholds. Alert thresholds are relative to a normal day of the same system (docs/measurements.md,
// What the detector's thresholds rest on); these are the ratios to the baseline, plus the absolute floors used only when the baseline has
// no records (then the report says so).
const (
	// QueueWaitMinS is the mean queue wait above which requests are waiting for a slot: the four
	// measured workloads read exactly 0.000 s unless overloaded (0.472 s; docs/measurements.md).
	QueueWaitMinS = 0.05
	// QueueDominantShare is the share of TTFT the queue wait must reach to dominate it
	// (overload: 0.472 of 0.853 s = 55%).
	QueueDominantShare = 0.25
	// RiseRatio is how many times the baseline a quantity must reach to count as "up".
	RiseRatio = 1.5
	// UnchangedRatio bounds "unchanged": within [1/UnchangedRatio, UnchangedRatio] of the baseline.
	UnchangedRatio = 1.5
	// MinPromptRiseTokens, MinOutputRiseTokens and MinTPOTRiseS keep tiny absolute moves of
	// small baselines from counting as rises.
	MinPromptRiseTokens = 64
	MinOutputRiseTokens = 32
	MinTPOTRiseS        = 0.005
	// LongPromptFloorTokens and LongOutputFloorTokens are the absolute floors without a baseline.
	LongPromptFloorTokens = 1024
	LongOutputFloorTokens = 512
	// LengthStopsMajority is the share of `length` stops above which answers run to max_tokens.
	LengthStopsMajority = 0.5
	// PrefixCacheHidingShare is the cached share of prompt tokens above which the prefix cache
	// hides most of the prefill cost.
	PrefixCacheHidingShare = 0.5
	// RetrievalDropAbs and RetrievalDropRel: the median top score must fall by both to count as drift.
	RetrievalDropAbs = 0.10
	RetrievalDropRel = 0.15
	// WrongScriptMinShare is the share of answers with foreign-script letters worth a finding (the
	// wrong-language incident of docs/measurements.md had 4 of 32 = 12.5%); with a baseline it must
	// also be twice the baseline plus WrongScriptMinRise.
	WrongScriptMinShare = 0.05
	WrongScriptMinRise  = 0.02
	// ServerErrorMinShare is the share of 5xx answers that makes a burst (with a baseline, also
	// twice the baseline's share).
	ServerErrorMinShare = 0.01
	// KVLowShare is the KV usage below which the KV cache is not what ran out.
	KVLowShare = 0.5
	// KVFullShare is the KV usage that counts as full: the kv_cache_pressure rule's threshold.
	KVFullShare = 0.95
	// RetrievalFloorScore is the median top score under which retrieval counts as drifted without
	// a baseline (retrieval_score_drift's floor).
	RetrievalFloorScore = 0.4
	// UnfinishedMinShare and UnfinishedMinCount: the share of started requests left unanswered
	// (UnfinishedGrace) and their number that make the unfinished finding. Absolute: a healthy
	// system answers every request, so no baseline is read for it.
	UnfinishedMinShare = 0.1
	UnfinishedMinCount = 5
	// DefaultMaxNumSeqs is vLLM's default slot limit (--max-num-seqs) for the OpenAI server on GPUs
	// under 70 GiB and on A100s (larger GPUs default to 1024: get_batch_defaults in
	// vllm/engine/arg_utils.py on main, _set_default_args_v1 at v0.10).
	DefaultMaxNumSeqs = 256
)

// Branch is one hypothesis of docs/measurements.md's From symptom to quantity walked against the
// numbers.
type Branch struct {
	// ID is one of the Branch constants.
	ID string `json:"id"`
	// Title is the hypothesis as that page words it.
	Title string `json:"title"`
	// Status is StatusFinding, StatusClear or StatusNoData.
	Status string `json:"status"`
	// Conclusion is one sentence: what the numbers say about the hypothesis.
	Conclusion string `json:"conclusion"`
	// Evidence lists the numbers the conclusion rests on, window against baseline.
	Evidence []string `json:"evidence,omitempty"`
	// NotRuledOut is the alternative these numbers could not exclude.
	NotRuledOut string `json:"not_ruled_out,omitempty"`
	// Action is what to check or change next, for a finding.
	Action string `json:"action,omitempty"`
	// Resolution is the length of the windows the range was read at for this branch (the window
	// of its rule, see Bearings); Window is the worst of them, when any held enough to be walked,
	// and FromWindow says the status and conclusion are that window's rather than the whole
	// range's (the whole range's conclusion is then in the evidence).
	Resolution time.Duration `json:"resolution_ns,omitempty"`
	Window     *Window       `json:"window,omitempty"`
	FromWindow bool          `json:"from_window,omitempty"`
	// At says it in words (WindowText).
	At string `json:"at,omitempty"`
	// Alerts are the alerts of the branch's own signature rules (Bearings) that fired in the
	// range: any makes the branch a finding.
	Alerts []Alert `json:"alerts,omitempty"`
}

// walk evaluates every branch, in BranchOrder, for the window cur against the baseline base
// (hasBase false when the baseline held no records).
func walk(cur, base *Stats, hasBase bool) []Branch {
	out := make([]Branch, 0, len(BranchOrder))
	for _, id := range BranchOrder {
		out = append(out, walkOne(id, cur, base, hasBase))
	}
	return out
}

// walkOne evaluates the branch id.
func walkOne(id string, cur, base *Stats, hasBase bool) Branch {
	if !hasBase {
		base = &Stats{}
	}
	switch id {
	case BranchQueueOverload:
		return queueOverload(cur, base)
	case BranchKVPressure:
		return kvPressure(cur, base, hasBase)
	case BranchUnfinished:
		return unfinished(cur)
	case BranchLongPrompt:
		return longPrompt(cur, base, hasBase)
	case BranchLongOutput:
		return longOutput(cur, base, hasBase)
	case BranchGenerationContention:
		return generationContention(cur, base, hasBase)
	case BranchRetrieval:
		return retrievalDrift(cur, base, hasBase)
	case BranchWrongLanguage:
		return wrongLanguage(cur, base, hasBase)
	case BranchEngineCrash:
		return engineCrash(cur, base, hasBase)
	}
	panic("diagnose: unknown branch " + id)
}

// branchTitles and branchActions are each branch's hypothesis and the next step of a finding; a
// branch found from an alert alone takes its action from here.
var branchTitles = map[string]string{
	BranchQueueOverload:        "Queue-dominated overload (\"it takes ages for the first word\", \"it hangs when lots of people use it\")",
	BranchKVPressure:           "KV cache pressure (running requests preempted because no KV block was free)",
	BranchUnfinished:           "Requests left unfinished (\"it hangs\": started, not answered)",
	BranchLongPrompt:           "Long prompts (input tokens up, possibly hidden by the prefix cache)",
	BranchLongOutput:           "Long outputs (\"answers take long\" but text appears immediately)",
	BranchGenerationContention: "Generation contention (\"the text appears slowly\": TPOT up with output tokens unchanged)",
	BranchRetrieval:            "Retrieval drift or version change (\"off-topic answers\", no errors)",
	BranchWrongLanguage:        "Wrong-language output (\"answers mixed with Chinese\")",
	BranchEngineCrash:          "Engine crash (\"the server threw 500 and then vanished\")",
}

var branchActions = map[string]string{
	BranchQueueOverload:        "limit the load or add machines; watch waiting and queue wait over time",
	BranchKVPressure:           "lower --max-num-seqs or --max-model-len, enable prefix caching, or give the KV cache more memory (--gpu-memory-utilization, more GPUs)",
	BranchUnfinished:           "check waiting and running against max_num_seqs and the engine's health (its /metrics, its log): shed load or add capacity before the backlog grows without bound",
	BranchLongPrompt:           "shorten the prompt or reuse a common prefix so the prefix cache serves it; check the prompt version",
	BranchLongOutput:           "check max_tokens and the prompt; address the cause in the prompt, the kind of questions or the model before adding GPUs",
	BranchGenerationContention: "compare against concurrent load on the GPU and the engine's step time; cap --max-num-seqs if the batch grows",
	BranchRetrieval:            "check the retrieval pipeline: embedding model and index versions must match; re-embed or roll back",
	BranchWrongLanguage:        "check the model, the prompt and the decoding settings; add a dedicated output rule",
	BranchEngineCrash:          "servescope postmortem (reads the engine's log: running, KV, bytes requested)",
}

// Title is the hypothesis of branch id as docs/measurements.md words it.
func Title(id string) string { return branchTitles[id] }

func queueOverload(cur, base *Stats) Branch {
	br := Branch{ID: BranchQueueOverload, Title: Title(BranchQueueOverload)}
	q, w := cur.QueueMean, cur.WaitingMax
	if q == nil && w == nil {
		br.Status = StatusNoData
		br.Conclusion = "neither the queue wait nor the waiting count was recorded (gateway queue_s, engine spans, or engine samples)"
		return br
	}
	if q != nil {
		ev := "queue wait mean " + vs(q, base.QueueMean, secs)
		if cur.TTFTMean != nil && *cur.TTFTMean > 0 {
			ev += fmt.Sprintf(", %s of TTFT mean %s", pct(*q / *cur.TTFTMean), secs(*cur.TTFTMean))
		}
		br.Evidence = append(br.Evidence, ev)
	}
	if w != nil {
		br.Evidence = append(br.Evidence, "waiting max "+vs(w, base.WaitingMax, count))
	}
	if cur.RunningMax != nil {
		br.Evidence = append(br.Evidence, "running max "+vs(cur.RunningMax, base.RunningMax, count))
	}
	queued := q != nil && *q >= QueueWaitMinS
	if q == nil {
		queued = *w >= 1
	}
	dominant := queued && (q == nil || cur.TTFTMean == nil || *cur.TTFTMean <= 0 || *q >= QueueDominantShare**cur.TTFTMean)
	if !queued {
		br.Status = StatusClear
		br.Conclusion = "no queue: requests got a slot at once, so queue-dominated overload is less likely (not enough to rule out long prompts hidden by the prefix cache or generation contention)"
		return br
	}
	if !dominant {
		br.Status = StatusClear
		br.Conclusion = fmt.Sprintf("requests queued, but the wait is under %s of TTFT: something else dominates the first token", pct(QueueDominantShare))
		return br
	}
	br.Status = StatusFinding
	br.Conclusion = "requests wait for a slot: the engine is past its serving capacity"
	if cur.RunningMax != nil && *cur.RunningMax == DefaultMaxNumSeqs {
		br.Evidence = append(br.Evidence, fmt.Sprintf("running stops at exactly %d, vLLM's default --max-num-seqs: every slot is taken", DefaultMaxNumSeqs))
	}
	switch {
	case cur.Preemptions != nil && *cur.Preemptions > 0:
		// Preemption is the direct sign: whatever the gauge's samples showed, the KV cache ran
		// out between them.
		br.Evidence = append(br.Evidence, fmt.Sprintf("%s preemptions: the KV cache ran out too (vLLM preempts a running request only when no KV block is free)", count(*cur.Preemptions)))
		br.Conclusion += "; the KV cache ran out as well (preemptions)"
	case cur.KVMax != nil && *cur.KVMax < KVLowShare:
		ev := fmt.Sprintf("KV cache max %s: slots ran out, not KV memory", pct(*cur.KVMax))
		if cur.Preemptions != nil {
			ev += " (no preemption)"
		}
		br.Evidence = append(br.Evidence, ev)
	}
	if cur.RatePerSecond != nil {
		br.Evidence = append(br.Evidence, "request rate "+vs(cur.RatePerSecond, base.RatePerSecond, perSec))
	}
	switch rate := baseline.Compare(cur.RatePerSecond, base.RatePerSecond, RiseRatio, 0); {
	case rate.Up():
		br.NotRuledOut = "a loss of capacity (a slower engine, fewer replicas) on top of the extra load: these numbers cannot separate the two"
	case !rate.Known():
		br.NotRuledOut = "a loss of capacity rather than more load: there is no baseline arrival rate to tell the two apart, so check the engine's step time and replicas"
	default:
		br.NotRuledOut = "a loss of capacity rather than more load: the arrival rate did not rise, so check the engine's step time and replicas"
	}
	br.Action = branchActions[BranchQueueOverload]
	return br
}

// kvPressure reads KV cache pressure from its direct sign, preemptions: vLLM's scheduler preempts a
// running request (frees its KV blocks and recomputes it later) exactly when a running request
// needs a KV block and none is free (vllm/v1/core/sched/scheduler.py). The usage gauge, sampled
// every few seconds, can miss a cache that fills between samples; without a preemption count it
// is all there is, and a near-full maximum is then a finding that says so.
func kvPressure(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchKVPressure, Title: Title(BranchKVPressure)}
	p, kv := cur.Preemptions, cur.KVMax
	if p == nil && kv == nil {
		br.Status = StatusNoData
		br.Conclusion = "neither preemptions (vllm:num_preemptions_total, the stats line's Preemptions) nor KV cache usage were recorded"
		return br
	}
	if p != nil {
		ev := "preemptions " + count(*p)
		if hasBase && base.Preemptions != nil {
			ev = "preemptions " + vs(p, base.Preemptions, count)
		}
		br.Evidence = append(br.Evidence, ev+" ("+cur.PreemptionsSource+")")
	}
	if kv != nil {
		br.Evidence = append(br.Evidence, "KV cache max "+vs(kv, base.KVMax, pctPtr))
	}
	if cur.RunningMax != nil {
		br.Evidence = append(br.Evidence, "running max "+vs(cur.RunningMax, base.RunningMax, count))
	}
	switch {
	case p != nil && *p > 0:
		br.Status = StatusFinding
		br.Conclusion = fmt.Sprintf("vLLM preempted %s running requests: the KV cache ran out (preemption is its direct sign); preempted requests are recomputed, which costs throughput and latency", count(*p))
		if kv != nil && *kv < KVFullShare {
			br.Conclusion += fmt.Sprintf("; the usage samples (max %s) missed the moments it was full", pct(*kv))
		}
		br.NotRuledOut = "a few very long sequences filling the cache rather than the load: compare prompt and output tokens and max_tokens"
		br.Action = "lower --max-num-seqs or --max-model-len, enable prefix caching, or give the KV cache more memory (--gpu-memory-utilization, more GPUs)"
	case p != nil:
		br.Status = StatusClear
		br.Conclusion = "no preemption: the KV cache never ran out"
	case *kv >= KVFullShare:
		br.Status = StatusFinding
		br.Conclusion = fmt.Sprintf("the KV cache reached %s (preemptions were not recorded, so whether it ran out cannot be told)", pct(*kv))
		br.NotRuledOut = "a cache that ran full without preempting: only vllm:num_preemptions_total tells"
		br.Action = "scrape vllm:num_preemptions_total; lower --max-num-seqs or --max-model-len if requests are preempted"
	default:
		br.Status = StatusClear
		br.Conclusion = fmt.Sprintf("KV cache max %s, far from full (preemptions were not recorded)", pct(*kv))
	}
	return br
}

// tokensRose reports whether a mean token count rose against the baseline's (by RiseRatio and at
// least minRise tokens), or, without a baseline, reaches the absolute floor, which it then names
// in the branch's evidence.
func tokensRose(br *Branch, cur, base *float64, hasBase bool, minRise, floor float64) bool {
	c := baseline.Compare(cur, base, RiseRatio, minRise)
	if hasBase && c.Known() {
		return c.Up()
	}
	br.Evidence = append(br.Evidence, fmt.Sprintf("no baseline: absolute floor %s", tokens(floor)))
	return *cur >= floor
}

func longPrompt(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchLongPrompt, Title: Title(BranchLongPrompt)}
	p := cur.PromptTokensMean
	if p == nil {
		br.Status = StatusNoData
		br.Conclusion = "input token counts were not recorded"
		return br
	}
	br.Evidence = append(br.Evidence, "input tokens mean "+vs(p, base.PromptTokensMean, tokens))
	up := tokensRose(&br, p, base.PromptTokensMean, hasBase, MinPromptRiseTokens, LongPromptFloorTokens)
	if cur.PrefillMean != nil {
		br.Evidence = append(br.Evidence, "prefill mean "+vs(cur.PrefillMean, base.PrefillMean, secs))
	}
	if cur.TTFTMean != nil {
		br.Evidence = append(br.Evidence, "TTFT mean "+vs(cur.TTFTMean, base.TTFTMean, secs))
	}
	if cur.CachedShare != nil {
		br.Evidence = append(br.Evidence, fmt.Sprintf("prefix cache served %s of prompt tokens", pct(*cur.CachedShare)))
	}
	if !up {
		br.Status = StatusClear
		br.Conclusion = "input tokens did not rise: prompts are not longer"
		if !hasBase || base.PromptTokensMean == nil {
			br.Conclusion = "input tokens are under the absolute floor (no baseline to compare with): prompts are not long"
		}
		return br
	}
	br.Status = StatusFinding
	br.Conclusion = "prompts are longer: token counts are the stable signature, whatever the timings say"
	if c4 := cur.StatusCodes[400]; c4 > 0 {
		br.Evidence = append(br.Evidence, fmt.Sprintf("%d requests answered 400 (the input limit doing its job)", c4))
	}
	switch {
	case cur.CachedShare != nil && *cur.CachedShare >= PrefixCacheHidingShare:
		br.NotRuledOut = fmt.Sprintf("a far higher TTFT for different long prompts: the prefix cache served %s of the prompt tokens and hides the prefill cost (an RTX 3060 took ~1.55 s to prefill 2,843 uncached tokens of Qwen2.5-7B)", pct(*cur.CachedShare))
	case cur.CachedShare == nil:
		br.NotRuledOut = "that the prefix cache hides part of the prefill cost: cached_tokens was not recorded, so the timings may understate it"
	default:
		br.NotRuledOut = "a change of input workload rather than of the prompt template: compare prompt_version between the windows"
	}
	br.Action = branchActions[BranchLongPrompt]
	return br
}

func longOutput(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchLongOutput, Title: Title(BranchLongOutput)}
	o := cur.CompletionTokensMean
	if o == nil {
		br.Status = StatusNoData
		br.Conclusion = "output token counts were not recorded"
		return br
	}
	br.Evidence = append(br.Evidence, "output tokens mean "+vs(o, base.CompletionTokensMean, tokens))
	up := tokensRose(&br, o, base.CompletionTokensMean, hasBase, MinOutputRiseTokens, LongOutputFloorTokens)
	if cur.LengthShare != nil {
		br.Evidence = append(br.Evidence, "`length` stops "+vs(cur.LengthShare, base.LengthShare, pctPtr))
	}
	if cur.MaxTokensMean != nil {
		br.Evidence = append(br.Evidence, "max_tokens mean "+vs(cur.MaxTokensMean, base.MaxTokensMean, tokens))
	}
	if cur.E2EMean != nil {
		ev := "E2E mean " + vs(cur.E2EMean, base.E2EMean, secs)
		if cur.TTFTMean != nil {
			ev += " with TTFT mean " + vs(cur.TTFTMean, base.TTFTMean, secs)
		}
		br.Evidence = append(br.Evidence, ev)
	}
	if !up {
		br.Status = StatusClear
		br.Conclusion = "output tokens did not rise: answers are not longer"
		if !hasBase || base.CompletionTokensMean == nil {
			br.Conclusion = "output tokens are under the absolute floor (no baseline to compare with): answers are not long"
		}
		return br
	}
	br.Status = StatusFinding
	if cur.LengthShare != nil && *cur.LengthShare >= LengthStopsMajority {
		br.Conclusion = "the system has to generate longer outputs: output tokens rose and most answers stop at max_tokens; the system is doing what it was asked, the job is long"
	} else {
		br.Conclusion = "output tokens rose but most answers stop on their own: the answers themselves got longer (suspect a long-output workload)"
	}
	if changed := versionChanges(cur, base, hasBase, "prompt_version", "model"); changed != "" {
		br.NotRuledOut = "that the change of " + changed + " made the answers longer rather than the questions"
	} else {
		br.NotRuledOut = "a change in the kind of questions (no prompt or model version change was recorded)"
	}
	br.Action = branchActions[BranchLongOutput]
	return br
}

func generationContention(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchGenerationContention, Title: Title(BranchGenerationContention)}
	t := cur.TPOTMean
	if t == nil {
		br.Status = StatusNoData
		br.Conclusion = "the time between tokens was not recorded"
		if cur.TPOTNote != "" {
			// The token-weighted inter-token latency is no stand-in: a mix of one long answer and
			// many short ones moves it with no request's TPOT moving.
			br.Conclusion = "per-request TPOT was not recorded: " + cur.TPOTNote
		}
		return br
	}
	if !hasBase || base.TPOTMean == nil {
		br.Status = StatusCannotTell
		br.Evidence = []string{"TPOT mean " + secs(*t) + " (no baseline)"}
		br.Conclusion = "no baseline TPOT to compare against (TPOT depends on the load; there is no absolute floor)"
		return br
	}
	br.Evidence = append(br.Evidence, "TPOT mean "+vs(t, base.TPOTMean, secs))
	if cur.TPOTP95 != nil {
		br.Evidence = append(br.Evidence, "TPOT p95 "+vs(cur.TPOTP95, base.TPOTP95, secs))
	}
	tpot := baseline.Compare(t, base.TPOTMean, RiseRatio, MinTPOTRiseS)
	// "Unchanged" output: within [1/UnchangedRatio, UnchangedRatio] of the baseline's.
	out := baseline.Compare(cur.CompletionTokensMean, base.CompletionTokensMean, UnchangedRatio, 0)
	if cur.CompletionTokensMean != nil {
		br.Evidence = append(br.Evidence, "output tokens mean "+vs(cur.CompletionTokensMean, base.CompletionTokensMean, tokens))
	}
	running := baseline.Compare(cur.RunningMax, base.RunningMax, RiseRatio, 0)
	if cur.RunningMax != nil {
		br.Evidence = append(br.Evidence, "running max "+vs(cur.RunningMax, base.RunningMax, count))
	}
	switch {
	case !tpot.Up():
		br.Status = StatusClear
		br.Conclusion = "TPOT did not rise: the generation phase is not slower"
		return br
	case out.Change == baseline.Unknown:
		br.Status = StatusCannotTell
		br.Conclusion = "TPOT rose, but output tokens were not recorded, so contention cannot be told from longer generation"
		return br
	case out.Change == baseline.NoBaseline:
		br.Status = StatusCannotTell
		br.Conclusion = "TPOT rose, but the baseline holds no output token counts, so contention cannot be told from longer generation"
		return br
	case out.Change != baseline.Unchanged:
		br.Status = StatusClear
		br.Conclusion = "TPOT rose together with the output length: a consequence of generating longer (more sequences held), not contention on its own"
		return br
	}
	br.Status = StatusFinding
	if tpot.Change == baseline.New {
		br.Conclusion = "the generation phase takes time per token where the baseline's took none, for the same output length: resource contention in decoding"
	} else {
		br.Conclusion = fmt.Sprintf("the generation phase is %.1f times slower per token for the same output length: resource contention in decoding", tpot.Ratio)
	}
	switch {
	case running.Up():
		br.Conclusion += "; the running batch grew with it (batch too large)"
		br.NotRuledOut = "a slower GPU step (throttling, a co-located workload) adding to the larger batch"
		br.Action = "cap --max-num-seqs or add capacity (a large batch leaves the memory-bandwidth-bound regime: each step computes more)"
	case running.Change == baseline.Unknown || running.Change == baseline.NoBaseline:
		br.NotRuledOut = "a larger running batch: the running count has no baseline (or was not sampled), so whether the batch grew cannot be told"
		br.Action = "compare the running count with a normal period and the GPU's concurrent load; cap --max-num-seqs if the batch grew"
	default:
		br.NotRuledOut = "contention from outside the batch (a co-located workload, GPU throttling): the running count did not grow"
		br.Action = branchActions[BranchGenerationContention]
	}
	return br
}

// The retrieval branch's conclusions that readByWindow combines: a range whose versions changed
// while its median held, and a worst window in it where the score fell.
const (
	retrievalVersionsOnly               = "the retrieval versions changed; the median top score has not fallen (yet)"
	retrievalFellWithVersion            = "the top passage score fell with a retrieval version change: an incompatible encoder or index"
	retrievalFellWithVersionNotRuledOut = "that the questions changed at the same time"
)

func retrievalDrift(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchRetrieval, Title: Title(BranchRetrieval)}
	changed := versionChanges(cur, base, hasBase, "embedding_model_version", "index_version")
	mixed := mixedVersions(cur, "embedding_model_version", "index_version")
	if cur.RetrievalN == 0 && changed == "" && mixed == "" {
		br.Status = StatusNoData
		br.Conclusion = "no top-passage retrieval scores or retrieval versions were recorded (app.record)"
		return br
	}
	drop, noBase := false, cur.RetrievalTopP50 != nil && (!hasBase || base.RetrievalTopP50 == nil)
	if cur.RetrievalTopP50 != nil {
		br.Evidence = append(br.Evidence, fmt.Sprintf("top passage score p50 %s over %d records", vs(cur.RetrievalTopP50, base.RetrievalTopP50, score), cur.RetrievalN))
		if noBase {
			br.Evidence = append(br.Evidence, fmt.Sprintf("no baseline scores: absolute floor %s", score(RetrievalFloorScore)))
			drop = *cur.RetrievalTopP50 < RetrievalFloorScore
		} else {
			d := *base.RetrievalTopP50 - *cur.RetrievalTopP50
			drop = d >= RetrievalDropAbs && *base.RetrievalTopP50 > 0 && d / *base.RetrievalTopP50 >= RetrievalDropRel
		}
	}
	if changed != "" {
		br.Evidence = append(br.Evidence, "new "+changed)
	}
	if mixed != "" {
		br.Evidence = append(br.Evidence, "several versions in the window: "+mixed)
	}
	switch {
	case drop && (changed != "" || mixed != ""):
		br.Status = StatusFinding
		br.Conclusion, br.NotRuledOut = retrievalFellWithVersion, retrievalFellWithVersionNotRuledOut
	case drop && noBase:
		br.Status = StatusFinding
		br.Conclusion = "the median top passage score is under the absolute floor (no baseline scores to compare with): the retrieved passages do not match the questions"
		br.NotRuledOut = "a corpus whose scores are low by nature: without a baseline the floor is a guess"
	case drop:
		br.Status = StatusFinding
		br.Conclusion = "the top passage score fell with no recorded version change: the retrieval pipeline, index, corpus or question distribution changed"
		br.NotRuledOut = "an unrecorded index or corpus change versus a change in the questions"
	case changed != "" || mixed != "":
		br.Status = StatusFinding
		br.Conclusion = retrievalVersionsOnly
		br.NotRuledOut = "a drift the median does not show yet: compare the score distributions, not only p50"
	case noBase || cur.RetrievalTopP50 == nil:
		// Without baseline scores (or versions) a median above the floor and no version change
		// prove nothing: a drift from 0.88 to 0.5 would pass.
		br.Status = StatusCannotTell
		br.Conclusion = "no baseline scores to compare against: the median is above the absolute floor and no version changed, which does not rule a drift out"
		return br
	default:
		br.Status = StatusClear
		br.Conclusion = "the top passage score held and the versions did not change"
		return br
	}
	br.Action = branchActions[BranchRetrieval]
	return br
}

func wrongLanguage(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchWrongLanguage, Title: Title(BranchWrongLanguage)}
	s := cur.WrongScriptShare
	if s == nil {
		br.Status = StatusNoData
		br.Conclusion = "no output script checks were recorded (output_script_violation)"
		return br
	}
	br.Evidence = append(br.Evidence, fmt.Sprintf("answers with letters outside the allowed scripts %s (%s checked)", vs(s, base.WrongScriptShare, pctPtr), countText(cur.ScriptChecked, cur.estimated())))
	up := *s >= WrongScriptMinShare
	if hasBase && base.WrongScriptShare != nil {
		up = up && *s >= 2**base.WrongScriptShare+WrongScriptMinRise
	} else {
		br.Evidence = append(br.Evidence, "no baseline: absolute floor "+pct(WrongScriptMinShare))
	}
	if !up {
		br.Status = StatusClear
		br.Conclusion = "the share of wrong-script answers did not rise"
		if !hasBase || base.WrongScriptShare == nil {
			br.Conclusion = "the share of wrong-script answers is under the absolute floor (no baseline to compare with)"
		}
		return br
	}
	br.Status = StatusFinding
	br.Conclusion = "more answers contain letters outside the allowed scripts: an output content error that no engine timing catches"
	if changed := versionChanges(cur, base, hasBase, "model", "prompt_version"); changed != "" {
		br.Evidence = append(br.Evidence, "new "+changed)
	}
	br.NotRuledOut = "legitimate foreign names or quotations: the check counts letters, not languages"
	br.Action = branchActions[BranchWrongLanguage]
	return br
}

func engineCrash(cur, base *Stats, hasBase bool) Branch {
	br := Branch{ID: BranchEngineCrash, Title: Title(BranchEngineCrash)}
	if cur.Samples == 0 && cur.OOMLines == 0 && cur.ExceptionLines == 0 && cur.Share5xx == nil {
		br.Status = StatusNoData
		br.Conclusion = "no engine samples, engine log lines or request status codes were recorded"
		return br
	}
	var signals []string
	if cur.OOMLines > 0 {
		ev := fmt.Sprintf("engine log: %d out-of-memory line(s), the last at %s on %s", cur.OOMLines, stamp(cur.LastErrorTS), cur.LastErrorEngine)
		if cur.LastOOMBytes != nil {
			ev += fmt.Sprintf(" (%s requested)", mib(float64(*cur.LastOOMBytes)))
		}
		br.Evidence = append(br.Evidence, ev)
		signals = append(signals, "oom")
	} else if cur.ExceptionLines > 0 {
		br.Evidence = append(br.Evidence, fmt.Sprintf("engine log: %d exception line(s), the last %s at %s on %s", cur.ExceptionLines, cur.LastException, stamp(cur.LastErrorTS), cur.LastErrorEngine))
		signals = append(signals, "exception")
	}
	if cur.SamplesDown > 0 {
		br.Evidence = append(br.Evidence, fmt.Sprintf("%d of %d scrapes failed (up = 0), the first at %s on %s", cur.SamplesDown, cur.Samples, stamp(cur.FirstDown), cur.DownEngine))
		signals = append(signals, "down")
	}
	if cur.Share5xx != nil && *cur.Share5xx > 0 {
		n5 := uint64(math.Round(*cur.Share5xx * float64(sumCodes(cur.StatusCodes))))
		br.Evidence = append(br.Evidence, fmt.Sprintf("%d answers 5xx: %s", n5, vs(cur.Share5xx, base.Share5xx, pctPtr)))
		burst := *cur.Share5xx >= ServerErrorMinShare
		if hasBase && base.Share5xx != nil {
			burst = burst && *cur.Share5xx >= 2**base.Share5xx
		}
		if burst {
			signals = append(signals, "5xx")
		}
	}
	if len(signals) == 0 {
		br.Status = StatusClear
		br.Conclusion = "every scrape answered, no error in the engine log, no burst of 5xx"
		return br
	}
	br.Status = StatusFinding
	joined := strings.Join(signals, "+")
	switch {
	case strings.Contains(joined, "oom"):
		br.Conclusion = "the engine ran out of GPU memory and died"
		br.NotRuledOut = "a second, unrelated fault after the first death: read the whole log with postmortem"
	case strings.Contains(joined, "exception"):
		br.Conclusion = "the engine logged a fatal exception"
		br.NotRuledOut = "that the exception is a consequence of an earlier fault not in this window"
	case strings.Contains(joined, "down"):
		br.Conclusion = "the engine stopped answering its /metrics"
		br.NotRuledOut = "a deliberate restart or a network fault between collector and engine: no error line in the engine log"
	default:
		br.Conclusion = "a burst of 5xx answers"
		br.NotRuledOut = "a failure in a layer other than the engine: the requests' error_layer tells which"
	}
	engine := cur.LastErrorEngine
	if engine == "" {
		engine = cur.DownEngine
	}
	at := cur.LastErrorTS
	if at == nil {
		at = cur.FirstDown
	}
	if engine != "" && at != nil {
		br.Action = fmt.Sprintf("servescope postmortem --engine %s --at %s", shellQuote(engine), at.UTC().Format("2006-01-02T15:04:05Z"))
	} else {
		br.Action = branchActions[BranchEngineCrash]
	}
	return br
}

func unfinished(cur *Stats) Branch {
	br := Branch{ID: BranchUnfinished, Title: Title(BranchUnfinished)}
	if cur.Started == 0 {
		br.Status = StatusNoData
		br.Conclusion = "no request starts were recorded (the gateway's request.started)"
		return br
	}
	share := float64(cur.Unfinished) / float64(cur.Started)
	br.Evidence = append(br.Evidence, fmt.Sprintf("%d of %d requests that started were not answered by the window's end (%s; absolute floor %s and %d requests: a healthy system answers them all)",
		cur.Unfinished, cur.Started, pct(share), pct(UnfinishedMinShare), UnfinishedMinCount))
	if share < UnfinishedMinShare || cur.Unfinished < UnfinishedMinCount {
		br.Status = StatusClear
		br.Conclusion = "requests that start are answered"
		return br
	}
	br.Status = StatusFinding
	br.Conclusion = "requests start faster than they are answered: the system takes work it does not finish"
	if cur.WaitingMax != nil && *cur.WaitingMax >= 1 {
		br.Evidence = append(br.Evidence, "waiting max "+count(*cur.WaitingMax))
		br.NotRuledOut = "a hung engine rather than a full one: requests also wait, so check the running count against max_num_seqs"
	} else {
		br.NotRuledOut = "an engine that hangs or a stream that stalls rather than a lack of capacity: nothing waits in the engine's queue"
	}
	br.Action = branchActions[BranchUnfinished]
	return br
}

// versionChanges names the values of the given version kinds that appear in the window but not in
// the baseline, e.g. "embedding_model_version e5-v2 (baseline e5-v1)"; empty when none or no baseline.
func versionChanges(cur, base *Stats, hasBase bool, kinds ...string) string {
	if !hasBase {
		return ""
	}
	var parts []string
	for _, k := range kinds {
		var added []string
		for _, v := range sortedValues(cur.Versions[k]) {
			if _, ok := base.Versions[k][v]; !ok {
				added = append(added, v)
			}
		}
		if len(added) == 0 || len(base.Versions[k]) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (baseline %s)", k, strings.Join(added, ", "), strings.Join(sortedValues(base.Versions[k]), ", ")))
	}
	return strings.Join(parts, "; ")
}

// mixedVersions names the version kinds with more than one value inside the window.
func mixedVersions(cur *Stats, kinds ...string) string {
	var parts []string
	for _, k := range kinds {
		if vals := cur.Versions[k]; len(vals) > 1 {
			var vs []string
			for _, v := range sortedValues(vals) {
				vs = append(vs, fmt.Sprintf("%s (%d)", v, vals[v]))
			}
			parts = append(parts, k+" "+strings.Join(vs, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

func sumCodes(m map[uint16]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func shellQuote(s string) string {
	if strings.ContainsAny(s, " '\"\\$`&|;<>()*?!#~") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}
