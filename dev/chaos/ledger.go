package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/demo"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

// Ledger is the end-of-run account: what the clients and the run sent against what the
// pipeline stored. Every Gaps entry fails the run.
type Ledger struct {
	Lines []string
	Gaps  []string
}

func (l *Ledger) line(format string, a ...any) { l.Lines = append(l.Lines, fmt.Sprintf(format, a...)) }
func (l *Ledger) gap(format string, a ...any)  { l.Gaps = append(l.Gaps, fmt.Sprintf(format, a...)) }

// Print writes the ledger.
func (l *Ledger) Print(w io.Writer) {
	fmt.Fprintln(w, "\n================ LEDGER ================")
	for _, s := range l.Lines {
		fmt.Fprintln(w, s)
	}
	if len(l.Gaps) == 0 {
		fmt.Fprintln(w, "RESULT: no gap")
	} else {
		fmt.Fprintf(w, "RESULT: %d gap(s):\n", len(l.Gaps))
		for _, g := range l.Gaps {
			fmt.Fprintln(w, "  GAP: "+g)
		}
	}
	fmt.Fprintln(w, "========================================")
}

// idCounts returns, for each request_id of table (with FINAL, so storage de-duplication
// applies), how many rows carry it.
func idCounts(ctx context.Context, conn driver.Conn, table, where string) (map[string]uint64, error) {
	q := "SELECT request_id, count() FROM " + table + " FINAL"
	if where != "" {
		q += " WHERE " + where
	}
	q += " GROUP BY request_id"
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read request ids of %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var id string
		var n uint64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("scan request ids of %s: %w", table, err)
		}
		out[id] = n
	}
	return out, rows.Err()
}

// compare sets want (ids that must be stored once) against got (stored ids and their row
// counts): lost are wanted ids absent, duplicated are ids stored more than once, extra are
// stored ids nobody wanted.
func compare(want map[string]bool, got map[string]uint64) (lost, dup, extra []string) {
	for id := range want {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	for id, n := range got {
		if n > 1 {
			dup = append(dup, id)
		}
		if !want[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(lost)
	sort.Strings(dup)
	sort.Strings(extra)
	return
}

func sample(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > 5 {
		return " e.g. " + strings.Join(ids[:5], ", ") + " …"
	}
	return " " + strings.Join(ids, ", ")
}

// dlqEntry is one dead letter as read back from the DLQ stream.
type dlqEntry struct {
	reason, subject string
	count           int
}

// readDLQ reads every message of the dead-letter stream, by original stream sequence.
func readDLQ(ctx context.Context, js jetstream.JetStream, prefix string) (map[uint64]*dlqEntry, int, error) {
	topo := bus.Topology{Prefix: prefix}
	st, err := js.Stream(ctx, topo.DLQStream())
	if err != nil {
		return nil, 0, fmt.Errorf("open stream %s: %w", topo.DLQStream(), err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("stream info of %s: %w", topo.DLQStream(), err)
	}
	out := map[uint64]*dlqEntry{}
	total := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read dead letter %d: %w", seq, err)
		}
		total++
		orig, _ := strconv.ParseUint(m.Header.Get(bus.HeaderDLQStreamSeq), 10, 64)
		e := out[orig]
		if e == nil {
			e = &dlqEntry{reason: m.Header.Get(bus.HeaderDLQReason), subject: m.Header.Get(bus.HeaderDLQSubject)}
			out[orig] = e
		}
		e.count++
	}
	return out, total, nil
}

// alertLedger checks the webhook receiver's log: one notification per (fingerprint, episode,
// status) — a repeat before DETECTOR_REPEAT_INTERVAL (1 h here) is a duplicate — and the
// alert held across the detector restart fired once and resolved once.
func alertLedger(l *Ledger, recv *demo.Receiver, kvEngine string, repeat time.Duration) {
	alerts := recv.Alerts()
	type key struct {
		fp, status string
		start      time.Time
	}
	seen := map[key][]time.Time{}
	var order []key
	for _, a := range alerts {
		k := key{a.Fingerprint, a.Status, a.StartsAt}
		if _, ok := seen[k]; !ok {
			order = append(order, k)
		}
		seen[k] = append(seen[k], a.At)
	}
	dups := 0
	for _, k := range order {
		ts := seen[k]
		for i := 1; i < len(ts); i++ {
			if ts[i].Sub(ts[i-1]) < repeat {
				dups++
				l.gap("alert fingerprint %s (episode %s) notified %q again after %.1fs (repeat interval %s)", k.fp, k.start.Format(time.RFC3339), k.status, ts[i].Sub(ts[i-1]).Seconds(), repeat)
			}
		}
	}
	kvFiring, kvResolved := 0, 0
	fps := map[string]bool{}
	for _, a := range alerts {
		if a.Rule == "kv_cache_pressure" && a.Labels["engine"] == kvEngine {
			fps[a.Fingerprint] = true
			switch a.Status {
			case "firing":
				kvFiring++
			case "resolved":
				kvResolved++
			}
		}
	}
	episodes := demo.Episodes(alerts)
	l.line("alerts      notifications received: %d in %d episode(s); duplicated: %d", len(alerts), len(episodes), dups)
	for _, e := range episodes {
		res := "still firing"
		if !e.ResolvedAt.IsZero() {
			res = "resolved " + e.ResolvedAt.Format("15:04:05")
		}
		l.line("              %-22s %-32s fired %s, %s", e.Rule, e.Labels, e.FiredAt.Format("15:04:05"), res)
	}
	l.line("            kv_cache_pressure on %s across the detector restart: firing notified %d×, resolved %d× (want 1 and 1)", kvEngine, kvFiring, kvResolved)
	if kvFiring != 1 || kvResolved != 1 || len(fps) != 1 {
		l.gap("the alert held across the detector restart was notified firing %d×, resolved %d× under %d fingerprint(s); want once each under one", kvFiring, kvResolved, len(fps))
	}
}

// waitSettled waits until the stored request ids cover what the clients saw succeed and the
// dead-letter stream holds the burst, or timeout passes (the ledger then shows the gap).
func (r *run) waitSettled(ctx context.Context, wantReq, wantApp map[string]bool, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		fin, err1 := idCounts(ctx, r.conn, "requests", "")
		sta, err2 := idCounts(ctx, r.conn, "requests_started", "")
		app, err3 := idCounts(ctx, r.conn, "app_records", "")
		spans, err5 := idCounts(ctx, r.conn, "engine_spans", "")
		dlq, _, err4 := readDLQ(ctx, r.js, prefix)
		samples, err6 := r.samplesBefore(ctx)
		if err1 == nil && err2 == nil && err3 == nil && err4 == nil && err5 == nil && err6 == nil &&
			covers(fin, wantReq) && covers(sta, wantReq) && covers(app, wantApp) && covers(spans, wantReq) && len(dlq) >= len(r.burstSt.bad) &&
			(r.collector.err != nil || samples >= uint64(r.collector.vals["servescope_collector_scrapes_total"])) {
			return
		}
		if sleep(ctx, time.Second) != nil {
			return
		}
	}
}

func covers(got map[string]uint64, want map[string]bool) bool {
	for id := range want {
		if got[id] == 0 {
			return false
		}
	}
	return true
}

func (r *run) ledger(ctx context.Context) (*Ledger, error) {
	l := &Ledger{}
	outcomes := r.traffic.Book.All()
	wantReq, wantApp := map[string]bool{}, map[string]bool{}
	var okLoad, okRAG, failLoad, failRAG, ragViaGW int
	failures := map[string]int{}
	for _, o := range outcomes {
		if o.OK && o.Gateway {
			wantReq[o.ID] = true
		}
		if o.Source == "ragdemo" {
			// ragdemo publishes one app.record per answered ask, success or not.
			if !strings.HasPrefix(o.Err, "connection:") {
				wantApp[o.ID] = true
			}
			if o.OK {
				okRAG++
				if o.Gateway {
					ragViaGW++
				}
			} else {
				failRAG++
			}
		} else if o.OK {
			okLoad++
		} else {
			failLoad++
		}
		if !o.OK {
			failures[o.Source+": "+o.Err]++
		}
	}
	for _, id := range r.burstSt.accepted {
		wantApp[id] = true
	}
	r.mu.Lock()
	for _, id := range r.ingested {
		wantApp[id] = true
	}
	r.mu.Unlock()
	r.step("waiting for the pipeline to settle (up to 90 s)…")
	r.waitSettled(ctx, wantReq, wantApp, 90*time.Second)

	l.line("run         %.0fs; faults in order:", time.Since(r.started).Seconds())
	r.mu.Lock()
	for _, t := range r.timeline {
		l.line("              %s", t)
	}
	r.mu.Unlock()

	reps, runErrs := r.traffic.Reports()
	repSent, repOK := 0, 0
	for _, rep := range reps {
		repSent += rep.Sent
		repOK += rep.Succeeded
	}
	l.line("clients     loadgen: %d requests, %d succeeded, %d failed (loadgen's own count: %d sent, %d succeeded in %d runs)", okLoad+failLoad, okLoad, failLoad, repSent, repOK, len(reps))
	l.line("            ragdemo: %d asks, %d answered (%d through the gateway), %d failed", okRAG+failRAG, okRAG, ragViaGW, failRAG)
	if repOK != okLoad || repSent != okLoad+failLoad {
		l.gap("loadgen counted %d sent / %d succeeded, the chaos client recorder %d / %d", repSent, repOK, okLoad+failLoad, okLoad)
	}
	for _, e := range runErrs {
		l.gap("a loadgen run could not start: %s", e)
	}
	keys := make([]string, 0, len(failures))
	for k := range failures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l.gap("user-visible error caused by the pipeline (no fault in this run takes a client's request away): %d× %s", failures[k], k)
	}
	l.line("            user-visible errors: %d (deliberate: 0 — traffic pauses while the gateway restarts)", failLoad+failRAG)

	var lostTotal, dupTotal int
	check := func(label, table string, want map[string]bool, where string) {
		got, err := idCounts(ctx, r.conn, table, where)
		if err != nil {
			l.gap("%s: %v", label, err)
			return
		}
		lost, dup, extra := compare(want, got)
		var rows uint64
		for _, n := range got {
			rows += n
		}
		lostTotal += len(lost)
		dupTotal += len(dup)
		l.line("%-11s want %d request ids; %s FINAL: %d rows, %d ids; lost: %d, duplicated: %d, unexpected: %d", label, len(want), table, rows, len(got), len(lost), len(dup), len(extra))
		if len(lost) > 0 {
			l.gap("%s: %d request ids the clients saw succeed are missing from %s:%s", label, len(lost), table, sample(lost))
		}
		if len(dup) > 0 {
			l.gap("%s: %d request ids have more than one row in %s FINAL:%s", label, len(dup), table, sample(dup))
		}
		if len(extra) > 0 {
			l.gap("%s: %d request ids in %s that no client saw succeed:%s", label, len(extra), table, sample(extra))
		}
	}
	check("started", "requests_started", wantReq, "")
	check("finished", "requests", wantReq, "")
	check("app records", "app_records", wantApp, "")
	check("spans", "engine_spans", wantReq, "")
	for _, t := range []string{"requests_started", "requests", "app_records", "engine_spans", "engine_samples"} {
		var raw, final uint64
		if err := r.conn.QueryRow(ctx, "SELECT (SELECT count() FROM "+t+"), (SELECT count() FROM "+t+" FINAL)").Scan(&raw, &final); err != nil {
			l.gap("count rows of %s: %v", t, err)
			continue
		}
		l.line("storage     %-17s %6d rows stored, %6d after FINAL (redelivered copies the storage de-duplicated: %d)", t, raw, final, raw-final)
	}
	var wrongStatus uint64
	if err := r.conn.QueryRow(ctx, "SELECT count() FROM requests FINAL WHERE status_code != 200 OR error_layer != ''").Scan(&wrongStatus); err != nil {
		l.gap("check recorded status codes: %v", err)
	} else {
		l.line("            requests recorded with an error although the client saw success: %d", wrongStatus)
		if wrongStatus > 0 {
			l.gap("%d requests the clients saw succeed are recorded with an error status or layer", wrongStatus)
		}
	}

	// Hostile valid records: stored verbatim.
	for _, h := range r.burstSt.hostile {
		var n uint64
		err := r.conn.QueryRow(ctx, "SELECT count() FROM app_records FINAL WHERE request_id = {id:String} AND app = {app:String}",
			chNamed("id", h.RequestID), chNamed("app", h.App)).Scan(&n)
		if err != nil {
			l.gap("look up hostile record (%s): %v", h.Case, err)
			continue
		}
		l.line("hostile     %-50s stored verbatim: %v", h.Case, n == 1)
		if n != 1 {
			l.gap("hostile record (%s) stored %d times with its text verbatim, want 1", h.Case, n)
		}
	}
	for _, t := range []string{"requests", "requests_started", "app_records", "ingest_errors"} {
		var n uint64
		if err := r.conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {t:String}", chNamed("db", database), chNamed("t", t)).Scan(&n); err != nil || n != 1 {
			l.gap("table %s missing after the SQL-looking burst (%v)", t, err)
		}
	}

	// Malformed events: each in the DLQ with a reason, and in ingest_errors.
	dlq, dlqTotal, err := readDLQ(ctx, r.js, prefix)
	if err != nil {
		l.gap("read the DLQ: %v", err)
	}
	ie := map[uint64]string{}
	ieRows := map[uint64]uint64{}
	rows, err := r.conn.Query(ctx, "SELECT stream_seq, any(reason), count() FROM ingest_errors FINAL GROUP BY stream_seq")
	if err != nil {
		l.gap("read ingest_errors: %v", err)
	} else {
		for rows.Next() {
			var seq, n uint64
			var reason string
			if err := rows.Scan(&seq, &reason, &n); err == nil {
				ie[seq], ieRows[seq] = reason, n
			}
		}
		rows.Close()
	}
	inDLQ, inIE, dlqDup, ieDup := 0, 0, 0, 0
	l.line("malformed   %d events sent straight to NATS; DLQ stream holds %d messages", len(r.burstSt.bad), dlqTotal)
	for _, b := range r.burstSt.bad {
		d := dlq[b.Seq]
		reason := "-"
		switch {
		case d == nil:
			l.gap("malformed event %q (stream seq %d) is not in the DLQ", b.Case, b.Seq)
		case d.reason == "":
			l.gap("malformed event %q is in the DLQ without a %s header", b.Case, bus.HeaderDLQReason)
		default:
			inDLQ++
			reason = d.reason
			if d.count > 1 {
				dlqDup++
				l.gap("malformed event %q is %d times in the DLQ", b.Case, d.count)
			}
		}
		if ie[b.Seq] == "" {
			l.gap("malformed event %q (stream seq %d) has no ingest_errors row with a reason", b.Case, b.Seq)
		} else {
			inIE++
			if ieRows[b.Seq] > 1 {
				ieDup++
				l.gap("malformed event %q has %d ingest_errors rows", b.Case, ieRows[b.Seq])
			}
		}
		l.line("              %-34s %8d B  → %s", b.Case, len(b.Payload), schema.Truncate(reason, 110))
	}
	lostTotal += (len(r.burstSt.bad) - inDLQ) + (len(r.burstSt.bad) - inIE)
	dupTotal += dlqDup + ieDup
	if extra := dlqTotal - len(r.burstSt.bad) - dlqDup; extra > 0 {
		l.gap("the DLQ holds %d messages beyond the burst: good events were refused", extra)
	}
	l.line("            in DLQ with reason: %d/%d, in ingest_errors: %d/%d; lost: %d, duplicated: %d", inDLQ, len(r.burstSt.bad), inIE, len(r.burstSt.bad), (len(r.burstSt.bad)-inDLQ)+(len(r.burstSt.bad)-inIE), dlqDup+ieDup)

	// Ingest endpoint: each answer as expected, nothing refused written.
	l.line("ingest      %d requests to POST /servescope/v1/records", len(r.burstSt.ingest))
	for _, c := range r.burstSt.ingest {
		ok := c.Got == c.Want
		l.line("              %-40s %d (want %d) %s", c.Case, c.Got, c.Want, schema.Truncate(c.Body, 90))
		if !ok {
			l.gap("ingest case %q answered %d, want %d: %s", c.Case, c.Got, c.Want, c.Body)
		}
	}
	var leaked uint64
	if err := r.conn.QueryRow(ctx, "SELECT count() FROM app_records WHERE startsWith(request_id, 'chaos-ingest-bad-') OR startsWith(request_id, 'chaos-bad-')").Scan(&leaked); err != nil {
		l.gap("count refused records: %v", err)
	} else if leaked > 0 {
		l.gap("%d refused records were written to app_records", leaked)
	}
	l.line("            refused records written anyway: %d", leaked)

	r.mu.Lock()
	for _, c := range r.crashes {
		l.line("environment %s", c)
	}
	r.mu.Unlock()
	sl, sd := r.samplesLedger(ctx, l)
	lostTotal += sl
	dupTotal += sd
	alertLedger(l, r.recv, kvEngine, repeatInt)
	l.line("TOTAL       lost: %d, duplicated: %d", lostTotal, dupTotal)
	return l, nil
}

// samplesBefore counts the engine samples of the collector's engine scraped before traffic off.
func (r *run) samplesBefore(ctx context.Context) (uint64, error) {
	var n uint64
	err := r.conn.QueryRow(ctx, "SELECT count() FROM engine_samples FINAL WHERE engine = {e:String} AND ts < {t:DateTime64(6)}",
		chNamed("e", demo.EngineName), chNamed("t", r.collector.at.UTC().Format("2006-01-02 15:04:05.000000"))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count engine samples before traffic off: %w", err)
	}
	return n, nil
}

// samplesLedger checks the collector's engine samples against the collector's own count of
// scrapes at traffic off: every scrape that ended before then is one stored sample (one more
// may have been in progress), none stored twice; and samples exist for the time of each outage
// (spooled and replayed, or held while ClickHouse was away).
func (r *run) samplesLedger(ctx context.Context, l *Ledger) (lost, dup int) {
	var rows, distinct uint64
	if err := r.conn.QueryRow(ctx, "SELECT count(), uniqExact(ts) FROM engine_samples FINAL WHERE engine = {e:String}", chNamed("e", demo.EngineName)).Scan(&rows, &distinct); err != nil {
		l.gap("count engine samples: %v", err)
		return 0, 0
	}
	dup = int(rows - distinct)
	if dup > 0 {
		l.gap("%d engine samples of %s stored twice", dup, demo.EngineName)
	}
	if r.collector.err != nil {
		l.gap("read the collector's scrape count: %v", r.collector.err)
	} else {
		scrapes := int(r.collector.vals["servescope_collector_scrapes_total"])
		if before, err := r.samplesBefore(ctx); err != nil {
			l.gap("%v", err)
		} else {
			l.line("samples     collector scrapes of %s by traffic off: %d (dropped by its publisher: %.0f); engine_samples FINAL before then: %d; all: %d rows, %d distinct scrape times",
				demo.EngineName, scrapes, r.collector.vals["servescope_publish_events_dropped_total"], before, rows, distinct)
			if int(before) < scrapes {
				lost = scrapes - int(before)
				l.gap("%d collector samples of %s are missing: %d scrapes ended before traffic off, %d samples stored before then", lost, demo.EngineName, scrapes, before)
			}
			if int(before) > scrapes+1 {
				l.gap("%d more engine samples stored than the collector scraped", int(before)-scrapes-1)
			}
		}
		l.line("            lost: %d, duplicated: %d", lost, dup)
	}
	r.mu.Lock()
	windows := maps.Clone(r.windows)
	r.mu.Unlock()
	names := slices.Sorted(maps.Keys(windows))
	for _, name := range names {
		w := windows[name]
		var n uint64
		if err := r.conn.QueryRow(ctx, "SELECT count() FROM engine_samples FINAL WHERE engine = {e:String} AND ts BETWEEN {a:DateTime64(6)} AND {b:DateTime64(6)}",
			chNamed("e", demo.EngineName), chNamed("a", w[0].UTC().Format("2006-01-02 15:04:05.000000")), chNamed("b", w[1].UTC().Format("2006-01-02 15:04:05.000000"))).Scan(&n); err != nil {
			l.gap("count samples during the %s outage: %v", name, err)
			continue
		}
		l.line("            scraped during the %s outage (%.0fs): %d samples", name, w[1].Sub(w[0]).Seconds(), n)
		if n == 0 {
			l.gap("no collector sample scraped during the %s outage was stored", name)
		}
	}
	return lost, dup
}
