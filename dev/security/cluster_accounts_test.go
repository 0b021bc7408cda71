package security

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/dev/eventgen"
	"github.com/servescope/servescope/docs"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/access/accesstest"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/console/server"
	"github.com/servescope/servescope/services/consumer/sink"
	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/notify"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/service"
	"github.com/servescope/servescope/services/detector/slo"
)

// TestAccountsOnAShardedCluster runs, as each least-privilege account of `servescope access` and
// on two shards (a cluster secret, so that the shards run each query as the user who asked, as the
// compose cluster profile does), every query that account's holder runs:
//   - the consumer: its start-up schema check, its reading of the TTLs (from the local tables), an
//     insert of every event kind and of ingest_errors through the Distributed tables, and the
//     flush of their queues (what it queued while a shard was out);
//   - the detector: every built-in rule evaluated and its state recorded, alert state saved and
//     restored, a webhook delivery recorded and read back, diagnose's baseline hours computed and
//     written (diagnose_hourly), and diagnose;
//   - the console: every panel's series, baseline and marks, the alerts page, every complaint page
//     (diagnose and the slowest requests), the crash page (postmortem), the filter values, and
//     every ready query of the docs.
//
// On a sharded schema the views that take parameters run on the shards through the cluster table
// function, which needs READ ON REMOTE: the console's and the detector's accounts got code 497 from
// request_phases_sampled and request_facts_window (the phases and queue panels, overload_queue,
// diagnose). The wrappers are SQL SECURITY DEFINER views, so no account needs that grant; each
// still reads the shards' local tables with its own grants. Each account is also refused what it
// must not do on the cluster.
func TestAccountsOnAShardedCluster(t *testing.T) {
	t.Parallel()
	a := accesstest.Access(t)
	a.LocalDatabase = a.Database + "_local"
	_, admin := accesstest.ShardedServers(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	consumerCfg := accesstest.As(admin, a.Consumer)
	consumer := accesstest.Open(t, consumerCfg)
	detectorCfg := accesstest.As(admin, a.Detector)
	detector := accesstest.Open(t, detectorCfg)
	consoleCfg := accesstest.As(admin, a.Console)
	console := accesstest.Open(t, consoleCfg)
	root := accesstest.Open(t, admin)
	now := time.Now().UTC()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("consumer", func(t *testing.T) {
		s := sink.New(consumer)
		if err := s.Check(ctx); err != nil {
			t.Fatalf("schema check as the consumer: %v", err)
		}
		ret, err := s.LoadRetention(ctx)
		if err != nil {
			t.Fatalf("read the TTLs as the consumer: %v", err)
		}
		if r := ret[sink.TableRequests]; r.Table != a.LocalDatabase+".requests" || r.Keep != 30*24*time.Hour {
			t.Errorf("retention of requests read as the consumer: %+v, want 30 days from %s.requests", r, a.LocalDatabase)
		}
		const requests = 300
		for _, k := range schema.Kinds() {
			var evs []schema.Event
			for i := range requests {
				evs = append(evs, eventgen.Event(k, i, now.Add(-50*time.Minute+time.Duration(i)*8*time.Second)))
			}
			table, _ := sink.TableFor(k)
			if err := s.InsertEvents(ctx, k, evs, sink.Token(table, []string{"cluster-accounts", string(k)})); err != nil {
				t.Fatalf("insert %s as the consumer: %v", k, err)
			}
		}
		errs := []sink.IngestError{{TS: now, Subject: "servescope.v1.request.finished", StreamSeq: 7, Reason: "test", Payload: []byte("{")}}
		if err := s.InsertErrors(ctx, errs, sink.ErrorsToken(errs)); err != nil {
			t.Fatalf("insert ingest_errors as the consumer: %v", err)
		}
		// What it queued for a shard that did not answer, it sends once the shard answers
		// (sink.Sharded).
		for _, table := range access.ConsumerInsertTables {
			if err := consumer.Exec(ctx, "SYSTEM FLUSH DISTRIBUTED "+table); err != nil {
				t.Errorf("flush the Distributed table %s as the consumer: %v", table, err)
			}
		}
		if n := accesstest.Count(t, root, "requests"); n != requests {
			t.Errorf("requests holds %d rows through the Distributed table, want %d", n, requests)
		}
		var n uint64
		wantCode(t, "SELECT as the consumer", consumer.QueryRow(ctx, "SELECT count() FROM requests").Scan(&n), codeAccessDenied)
		wantCode(t, "SELECT from a local table as the consumer", consumer.QueryRow(ctx, "SELECT count() FROM `"+a.LocalDatabase+"`.requests").Scan(&n), codeAccessDenied)
	})

	t.Run("detector", func(t *testing.T) {
		// The built-in rules and the burn-rate rules of the built-in SLOs, as the detector loads them.
		loaded, err := service.Load(service.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Engines, err = slo.ParseEngines("engines.yaml", []byte("default: {price_per_hour: 1.2}\nengines:\n  vllm-0: {max_num_seqs: 64}\n")); err != nil {
			t.Fatal(err)
		}
		defs := loaded.Rules
		d, err := service.New(service.Config{ClickHouse: detectorCfg, Interval: 30 * time.Second, RepeatInterval: 4 * time.Hour, RuleConcurrency: 4}, detector, defs, prometheus.NewRegistry(), log)
		if err != nil {
			t.Fatal(err)
		}
		// The SLOs and the engines file go to every node's local tables, which each shard's
		// slo_requests_window and the cost and capacity views read there.
		if err := d.WriteConfig(ctx, loaded); err != nil {
			t.Fatalf("write the SLOs and the engines file as the detector: %v", err)
		}
		for _, table := range chstore.NodeTables {
			var shards uint64
			if err := root.QueryRow(ctx, "SELECT uniqExact(_shard_num) FROM cluster('"+accesstest.ShardedCluster+"', `"+a.LocalDatabase+"`."+table+")").Scan(&shards); err != nil || shards != 2 {
				t.Errorf("%s written by the detector on %d of 2 shards (%v)", table, shards, err)
			}
		}
		for _, def := range defs {
			r, err := rules.NewSQLRule(def, detector)
			if err != nil {
				t.Fatalf("prepare rule %s: %v", def.Name, err)
			}
			if _, err := r.Eval(ctx, now); err != nil {
				t.Errorf("rule %s as the detector: %v", def.Name, err)
			}
		}
		if err := d.Restore(ctx); err != nil {
			t.Errorf("restore alert state as the detector: %v", err)
		}
		for _, g := range d.Groups() {
			if err := g.Eval(ctx, now); err != nil {
				t.Errorf("evaluate and record a group as the detector: %v", err)
			}
		}
		labels := map[string]string{"alertname": "latency_p95", "severity": "warning", "model": "m"}
		alert := &alerting.Alert{Rule: "latency_p95", Fingerprint: alerting.Fingerprint(labels), Labels: labels,
			Annotations: map[string]string{"summary": "s"}, Severity: "warning", State: alerting.StateFiring, ActiveAt: now, FiredAt: now}
		store := alerting.CHStore{Conn: detector}
		if err := store.Save(ctx, now, []*alerting.Alert{alert}); err != nil {
			t.Errorf("save alert state as the detector: %v", err)
		}
		if loaded, err := store.Load(ctx); err != nil || len(loaded) == 0 {
			t.Errorf("load alert state as the detector: %d alerts, %v", len(loaded), err)
		}
		rec := notify.CHRecorder{Conn: detector}
		if err := rec.RecordDelivery(ctx, notify.Delivery{TS: now, Receiver: "https://hooks.example/x", GroupKey: "g", Status: "firing", Attempt: 1, OK: true,
			HTTPStatus: 200, Fingerprints: []string{alert.Fingerprint}, Statuses: []string{"firing"}, StartsAt: []time.Time{now}}); err != nil {
			t.Errorf("record a delivery as the detector: %v", err)
		}
		if _, err := rec.Accepted(ctx, now.Add(-time.Hour), []string{alert.Fingerprint}); err != nil {
			t.Errorf("read deliveries as the detector: %v", err)
		}
		// diagnose_hourly is kept for hours of 100,000 requests or more (diagnose.HourlyMinRequests):
		// one such hour, a whole one before now.
		hour := now.Add(-65 * time.Minute).Truncate(time.Hour)
		if err := root.Exec(chstore.WithParams(ctx, map[string]string{"hour": hour.Format("2006-01-02 15:04:05")}), `INSERT INTO requests
			(event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code, ttft_s, tpot_s, e2e_s, prompt_tokens, completion_tokens)
			SELECT concat('hour-', toString(number)), concat('hour-', toString(number)), t, t, t + 2, 'm', '/v1/chat/completions', true, 200, 0.2, 0.02, 2.0, 700, 120
			FROM (SELECT number, {hour:DateTime64(6, 'UTC')} + number * 0.03 AS t FROM numbers(`+strconv.Itoa(diagnose.HourlyMinRequests)+`))`); err != nil {
			t.Fatal(err)
		}
		if n, err := diagnose.Warm(ctx, detector, now, 3*time.Hour, log); err != nil || n == 0 {
			t.Errorf("compute diagnose's baseline hours as the detector: %d hours, %v", n, err)
		}
		if _, err := diagnose.Run(ctx, detector, diagnose.Options{Window: diagnose.Range{From: now.Add(-15 * time.Minute), To: now}}); err != nil {
			t.Errorf("diagnose as the detector: %v", err)
		}
		before := accesstest.Count(t, root, "requests")
		for _, stmt := range []string{
			"INSERT INTO requests (event_id) VALUES ('forged')",
			"INSERT INTO `" + a.LocalDatabase + "`.requests (event_id) VALUES ('forged')",
			"TRUNCATE TABLE `" + a.LocalDatabase + "`.alerts",
			"ALTER TABLE `" + a.LocalDatabase + "`.requests DELETE WHERE 1",
		} {
			wantCode(t, stmt+" as the detector", detector.Exec(ctx, stmt), codeAccessDenied)
		}
		if after := accesstest.Count(t, root, "requests"); after != before {
			t.Errorf("requests went from %d to %d rows through refused statements", before, after)
		}
	})

	t.Run("console", func(t *testing.T) {
		srv, err := server.New(server.Config{ClickHouse: consoleCfg, ListenAddr: "127.0.0.1:0", Auth: server.AuthProxy, QueryTimeout: 2 * time.Minute}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		h := srv.Handler()
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec.Code, rec.Body.String()
		}
		code, body := get("/api/panels")
		var panels []server.PanelInfo
		if err := json.Unmarshal([]byte(body), &panels); code != http.StatusOK || err != nil || len(panels) == 0 {
			t.Fatalf("GET /api/panels as the console: %d %v %s", code, err, firstLine(body))
		}
		var paths []string
		for _, p := range panels {
			paths = append(paths, "/api/panel/"+url.PathEscape(p.Name))
		}
		// The request page, by its request id and by its engine's id (the lookup's indexes).
		paths = append(paths, "/api/options", "/", "/alerts", "/crash", "/request/req-000000007", "/api/request/req-000000007",
			"/request/1_cmpl-req-000000011-0")
		for _, c := range server.Complaints {
			paths = append(paths, "/complaint/"+c.ID)
		}
		for _, p := range paths {
			code, body := get(p)
			if code != http.StatusOK || pageError(body) != "" {
				t.Errorf("GET %s as the console: %d %s", p, code, firstLine(pageError(body)+body))
			}
		}
		if _, err := diagnose.Run(ctx, console, diagnose.Options{Window: diagnose.Range{From: now.Add(-15 * time.Minute), To: now}}); err != nil {
			t.Errorf("diagnose as the console: %v", err)
		}
		if _, _, err := postmortem.Load(ctx, console, "", now); err != nil && !errors.Is(err, postmortem.ErrNoData) {
			t.Errorf("postmortem as the console: %v", err)
		}
		queries, err := docs.Statements(docs.CookbookPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range queries {
			rows, err := console.Query(ctx, q)
			if err != nil {
				t.Errorf("ready query (docs/%s) as the console: %v\n%s", docs.CookbookPage, err, q)
				continue
			}
			rows.Close()
		}
		var s string
		for _, col := range access.ContentColumns["requests"] {
			wantCode(t, "SELECT "+col+" as the console", console.QueryRow(ctx, "SELECT "+col+" FROM requests LIMIT 1").Scan(&s), codeAccessDenied)
			wantCode(t, "SELECT "+col+" from a local table as the console", console.QueryRow(ctx, "SELECT "+col+" FROM `"+a.LocalDatabase+"`.requests LIMIT 1").Scan(&s), codeAccessDenied)
		}
		// The cluster table function itself stays out of its reach: only the wrappers call it.
		var n uint64
		wantCode(t, "cluster() as the console", console.QueryRow(ctx, "SELECT count() FROM cluster('"+accesstest.ShardedCluster+"', `"+a.LocalDatabase+"`.requests)").Scan(&n), codeAccessDenied)
	})
}

// pageError is the error a console page shows in its banners, "" when it shows none.
func pageError(body string) string {
	for _, marker := range []string{`class="banner warn" role="alert">`, `<p class="bad">`} {
		if i := strings.Index(body, marker); i >= 0 {
			return body[i:]
		}
	}
	if i := strings.Index(body, `<div id="banner" class="banner" role="alert">`); i >= 0 {
		return body[i:]
	}
	if strings.HasPrefix(body, "{") && strings.Contains(body, `"error":`) {
		return body
	}
	return ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// wantCode fails t unless err carries ClickHouse exception code.
func wantCode(t *testing.T, what string, err error, code int32) {
	t.Helper()
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != code {
		t.Errorf("%s: got %v, want ClickHouse code %d", what, err, code)
	}
}

// codeAccessDenied is ClickHouse's ACCESS_DENIED (ErrorCodes.cpp).
const codeAccessDenied = 497
