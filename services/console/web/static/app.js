// servescope console: draws each panel with uPlot from /api/panel/<name>, keeps the filters in the
// URL (shareable), refreshes on demand, and shows a banner while ClickHouse does not answer.
(function () {
  "use strict";

  var palette = ["#2563eb", "#ea580c", "#0d9488", "#7c3aed", "#db2777", "#65a30d", "#a16207", "#0891b2"];
  var charts = {};
  var lastData = {};
  var retryTimer = null;
  var refreshTimer = null;

  function $(sel, root) { return (root || document).querySelector(sel); }
  function $all(sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); }

  // ---- the login page: a #token=... link logs in without the token ever reaching a server log.
  function login() {
    var form = $("#login");
    if (!form) return;
    var m = /^#token=(.+)$/.exec(location.hash);
    if (m) {
      $("#token").value = decodeURIComponent(m[1]);
      history.replaceState(null, "", location.pathname + location.search);
      form.submit();
    }
  }

  // ---- filters and URL ----------------------------------------------------------------------
  function viewQuery() {
    var p = new URLSearchParams(location.search);
    p.delete("refresh");
    return p.toString();
  }

  function filters() {
    var form = $("#filters");
    if (!form) return;
    var range = $("#f-range"), custom = $("#f-custom");
    range.addEventListener("change", function () {
      custom.hidden = range.value !== "";
      if (range.value !== "") form.requestSubmit();
    });
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var p = new URLSearchParams();
      if (range.value) {
        p.set("range", range.value);
      } else {
        if ($("#f-from").value) p.set("from", $("#f-from").value + ":00Z");
        if ($("#f-to").value) p.set("to", $("#f-to").value + ":00Z");
      }
      ["model", "app", "engine"].forEach(function (k) {
        var v = $("#f-" + k).value.trim();
        if (v) p.set(k, v);
      });
      var r = $("#f-refresh").value;
      if (r !== "0") p.set("refresh", r);
      // The page's own parameters stay: which request (arrival), rule or order it shows.
      var cur = new URLSearchParams(location.search);
      ["arrival", "rule", "slow"].forEach(function (k) {
        if (cur.get(k)) p.set(k, cur.get(k));
      });
      location.search = p.toString();
    });
    var sel = $("#f-refresh");
    var cur = new URLSearchParams(location.search).get("refresh") || "0";
    sel.value = ["0", "10", "30", "60"].indexOf(cur) >= 0 ? cur : "0";
    sel.addEventListener("change", function () {
      var p = new URLSearchParams(location.search);
      if (sel.value === "0") p.delete("refresh"); else p.set("refresh", sel.value);
      history.replaceState(null, "", location.pathname + "?" + p.toString());
      schedule();
    });
    fetch("/api/options?" + viewQuery(), { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (o) {
      if (!o) return;
      ["model", "app", "engine"].forEach(function (k) {
        var dl = $("#l-" + k);
        (o[k] || []).forEach(function (v) {
          var opt = document.createElement("option");
          opt.value = v;
          dl.appendChild(opt);
        });
      });
    }).catch(function () {});
  }

  function schedule() {
    if (refreshTimer) clearInterval(refreshTimer);
    refreshTimer = null;
    var s = parseInt(new URLSearchParams(location.search).get("refresh") || "0", 10);
    if (s > 0) {
      refreshTimer = setInterval(function () {
        if (document.body.dataset.page === "dashboard") loadAll();
        else location.reload();
      }, s * 1000);
    }
  }

  // ---- banner -------------------------------------------------------------------------------
  function outage(msg) {
    var b = $("#banner");
    b.textContent = msg + " The panels keep the last data they got; retrying every 10 s.";
    b.hidden = false;
    document.body.classList.add("down");
    if (!retryTimer) retryTimer = setInterval(loadAll, 10000);
  }

  function recovered() {
    var b = $("#banner");
    if (document.body.classList.contains("down")) {
      b.hidden = true;
      document.body.classList.remove("down");
    }
    if (retryTimer) { clearInterval(retryTimer); retryTimer = null; }
  }

  // ---- formatting ---------------------------------------------------------------------------
  function compact(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return parseFloat((v / 1e6).toPrecision(3)) + "M";
    if (a >= 1e3) return parseFloat((v / 1e3).toPrecision(3)) + "k";
    return a >= 100 ? Math.round(v).toString() : (Math.round(v * 10) / 10).toString();
  }

  function fmt(unit) {
    return function (v) {
      if (v == null || isNaN(v)) return "–";
      switch (unit) {
        case "s":
          if (v === 0) return "0 s";
          if (Math.abs(v) < 1) return parseFloat((v * 1000).toPrecision(3)) + " ms";
          return parseFloat(v.toPrecision(3)) + " s";
        case "share": return (v * 100).toFixed(v < 0.1 ? 1 : 0) + "%";
        case "score": return v.toFixed(3);
        case "tokens": return compact(v);
        case "tokens_per_s": return compact(v) + "/s";
        case "requests_per_s": return (Math.abs(v) >= 100 ? Math.round(v) : parseFloat(v.toPrecision(3))) + "/s";
        case "ratio": return parseFloat(v.toPrecision(3)) + "×";
        case "usd": return "$" + (Math.abs(v) >= 100 ? Math.round(v).toString() : parseFloat(v.toPrecision(3)).toString());
        default: return Math.abs(v) >= 100 ? Math.round(v).toString() : (Math.round(v * 10) / 10).toString();
      }
    };
  }

  // ---- charts -------------------------------------------------------------------------------
  function build(el, data) {
    var unit = el.dataset.unit, unitRight = el.dataset.unitRight || unit;
    var stack = el.dataset.stack === "1";
    var chartEl = $("[data-chart]", el);
    var x = data.t.map(function (t) { return t / 1000; });
    var lines = data.lines.slice();
    var series = [{}];
    var cols = [x];
    var orig = [null];
    var ci = 0;
    var hasRight = lines.some(function (l) { return l.axis === "right"; });

    var seriesLines = lines.filter(function (l) { return l.kind === "series"; });
    var refLines = lines.filter(function (l) { return l.kind !== "series"; });
    if (stack) {
      var acc = x.map(function () { return null; });
      var stacked = seriesLines.map(function (l) {
        var vals = l.values.map(function (v, i) {
          if (v == null && acc[i] == null) return null;
          acc[i] = (acc[i] || 0) + (v || 0);
          return acc[i];
        });
        return { line: l, vals: vals };
      });
      stacked.reverse().forEach(function (s, k) {
        var color = palette[(stacked.length - 1 - k) % palette.length];
        series.push({ label: s.line.label, stroke: color, fill: color + "55", width: 1.5, points: { show: false },
          value: (function (o) { return function (u, v, si, idx) { return idx == null ? "–" : fmt(unit)(o[idx]); }; })(s.line.values) });
        cols.push(s.vals);
        orig.push(s.line.values);
      });
    } else {
      seriesLines.forEach(function (l) {
        var color = palette[ci++ % palette.length];
        var u = l.axis === "right" ? unitRight : unit;
        series.push({ label: l.label, stroke: color, width: 1.6, scale: l.axis === "right" ? "r" : "y",
          spanGaps: false, value: (function (f) { return function (uu, v) { return f(v); }; })(fmt(u)) });
        cols.push(l.values);
      });
    }
    var bi = 0;
    refLines.forEach(function (l) {
      var threshold = l.kind === "threshold";
      var crash = /crash/.test(l.label);
      var color = threshold ? "#dc2626" : crash ? "#7f1d1d" : ["#6b7280", "#9ca3af"][bi++ % 2];
      var u = l.axis === "right" ? unitRight : unit;
      series.push({ label: l.label, stroke: color, width: threshold || crash ? 1.4 : 1.8, dash: threshold ? [3, 3] : crash ? [10, 4] : [7, 5],
        spanGaps: true, points: { show: false }, scale: l.axis === "right" ? "r" : "y",
        value: (function (f) { return function (uu, v) { return f(v); }; })(fmt(u)) });
      cols.push(l.values);
    });

    var width = Math.max(280, chartEl.clientWidth || el.clientWidth - 20);
    var yRange = function (u, min, max) {
      if (min == null || max == null) return [0, 1];
      var lo = Math.min(0, min), hi = max > 0 ? max * 1.12 : 1;
      if (unit === "share" && hi > 1) hi = Math.min(hi, 1.05);
      if (unit === "score") { lo = Math.max(0, Math.min(min - 0.05, lo)); hi = Math.min(1.02, Math.max(hi, max + 0.05)); }
      return [lo, hi];
    };
    var axes = [
      { stroke: "#555", grid: { stroke: "#eee" }, ticks: { stroke: "#ddd" } },
      { scale: "y", stroke: "#555", grid: { stroke: "#eee" }, ticks: { stroke: "#ddd" }, size: 64,
        values: function (u, vals) { return vals.map(fmt(unit)); } }
    ];
    var scales = { x: { time: true, range: [data.from / 1000, data.to / 1000] }, y: { range: yRange } };
    if (hasRight) {
      axes.push({ scale: "r", side: 1, stroke: "#555", grid: { show: false }, size: 46,
        values: function (u, vals) { return vals.map(fmt(unitRight)); } });
      scales.r = { range: function (u, min, max) { return [0, max > 0 ? max * 1.12 : 1]; } };
    }
    var marks = data.marks || [];
    var opts = {
      width: width, height: 190, series: series, axes: axes, scales: scales,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      hooks: {
        draw: [function (u) {
          if (!marks.length) return;
          var ctx = u.ctx;
          ctx.save();
          ctx.strokeStyle = "#7c3aed";
          ctx.fillStyle = "#5b21b6";
          ctx.setLineDash([4, 3]);
          ctx.lineWidth = 1.5 * devicePixelRatio;
          ctx.font = (11 * devicePixelRatio) + "px system-ui, sans-serif";
          marks.forEach(function (m) {
            var px = u.valToPos(m.t / 1000, "x", true);
            if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) return;
            ctx.beginPath();
            ctx.moveTo(px, u.bbox.top);
            ctx.lineTo(px, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.fillText(m.text, px + 4 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
          });
          ctx.restore();
        }],
        setSelect: [function (u) {
          if (u.select.width < 5) return;
          var from = u.posToVal(u.select.left, "x"), to = u.posToVal(u.select.left + u.select.width, "x");
          var p = new URLSearchParams(location.search);
          p.delete("range");
          p.set("from", new Date(from * 1000).toISOString().replace(/\.\d+Z$/, "Z"));
          p.set("to", new Date(to * 1000).toISOString().replace(/\.\d+Z$/, "Z"));
          location.search = p.toString();
        }]
      }
    };
    chartEl.innerHTML = "";
    if (charts[el.dataset.panel]) charts[el.dataset.panel].destroy();
    var chart = new uPlot(opts, cols, chartEl);
    charts[el.dataset.panel] = chart;
    if (data.points === 0) {
      var note = document.createElement("div");
      note.className = "nodata";
      note.textContent = "nothing recorded in this range";
      chartEl.appendChild(note);
    }
    el.dataset.points = String(data.points);
    el.dataset.lines = String(lines.length);
    el.dataset.baselines = String(refLines.filter(function (l) { return l.values.some(function (v) { return v != null; }); }).length);
    el.classList.add("drawn");
  }

  function badge(el, rule) {
    var b = $("[data-badge]", el);
    if (!b || !rule || rule.state === "none") return;
    b.classList.remove("loading", "ok", "pending", "firing");
    b.classList.add(rule.state);
    b.dataset.state = rule.state;
    var names = rule.rules.join(", ");
    b.textContent = (rule.state === "ok" ? "ok" : rule.state.toUpperCase()) + " · " + rule.rules[0];
    var alerts = rule.alerts || [];
    b.title = alerts.length ? alerts.map(function (a) { return a.rule + " " + a.state + ": " + a.summary; }).join("\n") : "detector rules " + names + ": nothing pending or firing";
    var p = new URLSearchParams(viewQuery());
    p.set("rule", alerts.length ? alerts[0].rule : rule.rules[0]);
    b.href = "/alerts?" + p.toString();
  }

  function load(el) {
    var name = el.dataset.panel;
    return fetch("/api/panel/" + encodeURIComponent(name) + "?" + viewQuery(), { credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (body) { return { status: r.status, body: body }; });
      })
      .then(function (res) {
        if (res.status === 503 && res.body.clickhouse_down) {
          outage("ClickHouse at " + res.body.clickhouse + " is not answering: " + res.body.error + ".");
          el.classList.add("stale");
          if (!lastData[name]) $("[data-chart]", el).innerHTML = '<div class="empty">ClickHouse is not answering</div>';
          return false;
        }
        if (res.status === 401) { location.href = "/login?next=" + encodeURIComponent(location.pathname + location.search); return false; }
        if (res.status !== 200) {
          $("[data-chart]", el).innerHTML = "";
          var e = document.createElement("div");
          e.className = "empty bad";
          e.textContent = res.body.error || ("HTTP " + res.status);
          $("[data-chart]", el).appendChild(e);
          return true;
        }
        el.classList.remove("stale");
        lastData[name] = res.body;
        build(el, res.body);
        badge(el, res.body.rule);
        return true;
      })
      .catch(function (err) {
        outage("The console did not answer (" + err + ").");
        return false;
      });
  }

  function loadAll() {
    var els = $all("[data-panel]");
    if (!els.length) return;
    // A few at a time: the queries share a 2-core ClickHouse with the pipeline.
    var i = 0, ok = true;
    function next() {
      if (i >= els.length) {
        if (ok) recovered();
        document.body.dataset.loaded = "1";
        return Promise.resolve();
      }
      var batch = els.slice(i, i + 3);
      i += 3;
      return Promise.all(batch.map(load)).then(function (rs) {
        rs.forEach(function (r) { ok = ok && r; });
        return next();
      });
    }
    return next();
  }

  // Positions drawn by the server (alert lanes, a request's timeline, time axes) come as data-l
  // and data-w in percent: the page's policy allows no inline style attribute.
  function positions() {
    $all("[data-l]").forEach(function (s) {
      s.style.left = s.dataset.l + "%";
      if (s.dataset.w) s.style.width = s.dataset.w + "%";
    });
  }

  function resize() {
    Object.keys(charts).forEach(function (name) {
      var el = document.getElementById("panel-" + name);
      var c = $("[data-chart]", el);
      charts[name].setSize({ width: Math.max(280, c.clientWidth), height: 190 });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    login();
    filters();
    positions();
    schedule();
    if ($("[data-panel]")) loadAll();
    else document.body.dataset.loaded = "1";
    var t = null;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(resize, 150); });
  });
})();
