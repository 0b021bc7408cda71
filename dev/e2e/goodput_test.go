package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/slo"
	"github.com/servescope/servescope/sim/loadgen/load"
)

// requestFuncOutput is the part of vllm bench serve's RequestFuncOutput
// (vllm/benchmarks/lib/endpoint_request_func.py) that its goodput reads: success, ttft and
// latency in seconds, output_tokens (the usage's completion_tokens).
type requestFuncOutput struct {
	success      bool
	ttft         float64
	latency      float64
	outputTokens int
}

// vllmGoodput is vllm bench serve's goodput, line for line as calculate_metrics in
// vllm/benchmarks/serve.py (vLLM main) computes it: over the successful requests only, TPOT is
// (latency − ttft) / (output_len − 1), 0 when output_len ≤ 1; the SLOs (goodput_config_dict) are
// milliseconds, divided by 1000; a request is good when every SLO value is ≥ its metric; failed
// requests are never good; request_goodput = good_completed / dur_s.
func vllmGoodput(outputs []requestFuncOutput, durS float64, goodputConfig map[string]float64) (good int, requestGoodput float64) {
	const millisecondsToSecondsConversion = 1000
	var tpots, allTPOTs, ttfts, e2els []float64
	for _, o := range outputs {
		if !o.success {
			continue
		}
		outputLen := o.outputTokens
		if outputLen == 0 {
			outputLen = 1 // no usage and no tokenizer: vLLM counts 1
		}
		tpot := 0.0
		if outputLen > 1 {
			latencyMinusTTFT := o.latency - o.ttft
			tpot = latencyMinusTTFT / float64(outputLen-1)
			tpots = append(tpots, tpot)
		}
		allTPOTs = append(allTPOTs, tpot)
		ttfts = append(ttfts, o.ttft)
		e2els = append(e2els, o.latency)
	}
	var validMetrics [][]float64
	var sloValues []float64
	if v, ok := goodputConfig["ttft"]; ok {
		validMetrics = append(validMetrics, ttfts)
		sloValues = append(sloValues, v/millisecondsToSecondsConversion)
	}
	if v, ok := goodputConfig["tpot"]; ok {
		validMetrics = append(validMetrics, allTPOTs)
		sloValues = append(sloValues, v/millisecondsToSecondsConversion)
	}
	if v, ok := goodputConfig["e2el"]; ok {
		validMetrics = append(validMetrics, e2els)
		sloValues = append(sloValues, v/millisecondsToSecondsConversion)
	}
	for i := range ttfts {
		isGood := true
		for k, metric := range validMetrics {
			if !(sloValues[k] >= metric[i]) {
				isGood = false
			}
		}
		if isGood {
			good++
		}
	}
	return good, float64(good) / durS
}

// TestGoodputIsVLLMBenchServes: on one recorded run, servescope's goodput (slo_goodput, the
// view every panel and rule reads) counts the same good requests, and so the same rate, as vllm
// bench serve --goodput would on the same requests. The run goes through the whole pipeline
// (loadgen → gateway → vllmsim, recorded into ClickHouse): streamed and one-body answers, answers
// of 32 tokens and of one (TPOT 0 for vLLM), a request the engine refuses (400), plus rows of
// the requests table written in the same window for what the engine cannot be made to do here:
// a 503, a stream that broke after its 200, and answers exactly at each threshold (good: vLLM
// compares with ≥, docs/slo.md with ≤). Each request is handed to vLLM's formula as vllm bench
// serve's client would have recorded it: success for a 2xx that did not break, TTFT the
// stream's first token (a one-body answer's latency, as its non-streaming request functions
// set it), latency the E2E, output tokens the usage's. The thresholds are whole milliseconds
// near each figure's median, so that both sides hold good and bad requests for each.
func TestGoodputIsVLLMBenchServes(t *testing.T) {
	t.Parallel()
	p := startPipeline(t, pipelineOptions{})
	half := 0.5
	rep1, w1 := p.load(t, load.Config{Scenario: "normal", Requests: 24, Rate: 4, PromptTokens: 44, MaxTokens: 32, StreamShare: &half})
	rep2, w2 := p.load(t, load.Config{Scenario: "normal", Requests: 8, Rate: 4, PromptTokens: 44, MaxTokens: 1, StreamShare: &half})
	// A request vLLM refuses: max_tokens beyond the context.
	body := `{"model":"` + simModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":100000}`
	resp, err := http.Post(p.GatewayURL+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("max_tokens 100000: HTTP %d, want 400", resp.StatusCode)
	}
	end := time.Now().UTC()
	w := window{From: w1.From, To: end.Add(time.Second)}
	p.waitIngested(t, window{From: w1.From, To: w2.To}, rep1.Sent+rep2.Sent)
	waitFor(t, time.Minute, "the refused request's row", func(ctx context.Context) (bool, string, error) {
		var n uint64
		err := p.Conn.QueryRow(ctx, "SELECT count() FROM requests WHERE status_code = 400").Scan(&n)
		return n == 1, fmt.Sprint(n), err
	})

	type row struct {
		stream        bool
		status        uint16
		errorLayer    string
		ttft, e2e     *float64
		tokens        *uint32
		finishReasons []string
		arrival       time.Time
	}
	read := func() []row {
		rows, err := p.Conn.Query(t.Context(), `SELECT stream, status_code, error_layer, ttft_s, e2e_s, completion_tokens, finish_reasons, arrival_ts
			FROM requests FINAL
			WHERE arrival_ts >= fromUnixTimestamp64Micro($1, 'UTC') AND arrival_ts < fromUnixTimestamp64Micro($2, 'UTC')
			ORDER BY arrival_ts`, w.From.UnixMicro(), w.To.UnixMicro())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.stream, &r.status, &r.errorLayer, &r.ttft, &r.e2e, &r.tokens, &r.finishReasons, &r.arrival); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	recorded := read()
	// Whole milliseconds near each figure's median over the answered requests.
	var ttfts, tpots, e2es []float64
	for _, r := range recorded {
		if r.status != 200 || r.e2e == nil {
			continue
		}
		ttft := *r.e2e
		if r.stream {
			ttft = *r.ttft
		}
		ttfts, e2es = append(ttfts, ttft), append(e2es, *r.e2e)
		if r.stream && r.tokens != nil && *r.tokens > 1 {
			tpots = append(tpots, (*r.e2e-*r.ttft)/float64(*r.tokens-1))
		}
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	ttftMS, tpotMS, e2eMS := math.Ceil(median(ttfts)*1000), math.Ceil(median(tpots)*1000), math.Ceil(median(e2es)*1000)
	t.Logf("thresholds: ttft %g ms, tpot %g ms, e2e %g ms (medians of %d answers)", ttftMS, tpotMS, e2eMS, len(e2es))

	// The rows the engine cannot be made to write here, in the same window: a 503, a stream that
	// broke after its 200, a stream whose TTFT and E2E sit exactly on their thresholds (with as
	// many tokens as keep its TPOT under its own), and an answer in one body whose E2E, and so
	// TTFT, sits exactly on the TTFT threshold.
	at := w1.From.Add(time.Millisecond)
	thr := func(ms float64) float64 { return ms / 1000 }
	onEdge := uint32(math.Ceil((thr(e2eMS)-thr(ttftMS))/thr(tpotMS))) + 2
	for i, r := range []struct {
		stream     bool
		status     int
		errorLayer string
		ttft, e2e  *float64
		tokens     *uint32
	}{
		{true, 503, "upstream", nil, ptr(0.01), nil},
		{true, 200, "upstream", ptr(thr(ttftMS) / 2), ptr(thr(e2eMS) / 2), ptr(uint32(3))},
		{true, 200, "", ptr(thr(ttftMS)), ptr(thr(e2eMS)), &onEdge},
		{false, 200, "", nil, ptr(thr(ttftMS)), ptr(uint32(11))},
	} {
		if err := p.Conn.Exec(t.Context(), `INSERT INTO requests (event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream,
				status_code, error_layer, ttft_s, e2e_s, completion_tokens, finish_reasons)
			SELECT $1, $1, t, t, t, $3, '/v1/chat/completions', $4, $5, $6, $7, $8, $9, ['stop']
			FROM (SELECT fromUnixTimestamp64Micro($2, 'UTC') AS t)`,
			fmt.Sprintf("edge-%d", i), at.UnixMicro(), simModel, r.stream, r.status, r.errorLayer, r.ttft, r.e2e, r.tokens); err != nil {
			t.Fatal(err)
		}
	}

	// servescope's goodput, with the run's SLO in slo_objectives.
	def, err := slo.Parse("bench.yaml", fmt.Appendf(nil, "name: bench\nobjectives:\n  ttft: {under: %gms, target: 99%%}\n"+
		"  tpot: {under: %gms, target: 99%%}\n  e2e: {under: %gms, target: 99%%}\n", ttftMS, tpotMS, e2eMS))
	if err != nil {
		t.Fatal(err)
	}
	if err := slo.Sync(t.Context(), p.CH, p.Conn, []*slo.Definition{def}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var judged, good uint64
	var goodputRPS float64
	if err := p.Conn.QueryRow(t.Context(), `SELECT judged, good, goodput_rps
		FROM slo_goodput(from = fromUnixTimestamp64Micro($1, 'UTC'), to = fromUnixTimestamp64Micro($2, 'UTC')) WHERE slo = 'bench'`,
		w.From.UnixMicro(), w.To.UnixMicro()).Scan(&judged, &good, &goodputRPS); err != nil {
		t.Fatal(err)
	}

	// vllm bench serve's, from the same rows as its client would have recorded them.
	all := read()
	var outputs []requestFuncOutput
	for _, r := range all {
		o := requestFuncOutput{success: r.status == 200 && r.errorLayer == "" && r.e2e != nil && (!r.stream || r.ttft != nil)}
		if o.success {
			o.latency, o.ttft = *r.e2e, *r.e2e
			if r.stream {
				o.ttft = *r.ttft
			}
			if r.tokens != nil {
				o.outputTokens = int(*r.tokens)
			}
		}
		outputs = append(outputs, o)
	}
	durS := float64(w.To.UnixMicro()-w.From.UnixMicro()) / 1e6
	vGood, vRate := vllmGoodput(outputs, durS, map[string]float64{"ttft": ttftMS, "tpot": tpotMS, "e2el": e2eMS})
	t.Logf("%d requests recorded (%d judged): servescope %d good, %.6f req/s; vllm bench serve %d good, %.6f req/s",
		len(all), judged, good, goodputRPS, vGood, vRate)
	if int(good) != vGood || math.Abs(goodputRPS-vRate) > 1e-9*vRate {
		t.Errorf("goodput differs: servescope %d good (%.9f req/s), vllm bench serve %d (%.9f req/s)", good, goodputRPS, vGood, vRate)
	}
	if good == 0 || int(good) == len(all) || judged != uint64(len(all)-1) {
		t.Errorf("the run decides nothing: %d good of %d judged of %d recorded (want some good, some bad, all but the 400 judged)", good, judged, len(all))
	}
}

func ptr[T any](v T) *T { return &v }

// simModel is vllmsim's default served model name (sim.Options.Model).
const simModel = "servescope/sim-7b"
