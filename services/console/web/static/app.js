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

  // panelQuery is the view the panels are read for: on a complaint page the page's own range,
  // pinned, so that the panels draw the baseline figures of the reading above them (the server
  // keeps them for that range); elsewhere the URL's view, which a refresh moves.
  function panelQuery() {
    var p = new URLSearchParams(viewQuery());
    var b = document.body.dataset;
    if (b.page === "complaint" && b.from && b.to) {
      p.delete("range");
      p.set("from", b.from);
      p.set("to", b.to);
    }
    return p.toString();
  }

  function hhmm(ms) { return new Date(ms).toISOString().slice(11, 19); }

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
      // A baseline the baseline period holds none of is "no baseline": never drawn, never 0.
      var none = l.kind === "baseline" && !l.values.some(function (v) { return v != null; });
      series.push({ label: l.label + (none ? " (no baseline)" : ""), stroke: color, width: threshold || crash ? 1.4 : 1.8, dash: threshold ? [3, 3] : crash ? [10, 4] : [7, 5],
        spanGaps: true, points: { show: false }, scale: l.axis === "right" ? "r" : "y",
        value: (function (f, none) { return function (uu, v) { return none ? "no baseline" : f(v); }; })(fmt(u), none) });
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
    // The alerts of the panel's rules that fired in the range: a band from firing to resolution
    // (or the range's end), a solid line where it fired and a dashed one where it resolved.
    var fired = (data.rule && data.rule.in_range) || [];
    var opts = {
      width: width, height: 190, series: series, axes: axes, scales: scales,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      hooks: {
        draw: [function (u) {
          if (!fired.length) return;
          var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, left = u.bbox.left, right = left + u.bbox.width;
          var dpr = devicePixelRatio;
          // label writes a mark's text on a white backing, left-aligned from x (never past the plot's right edge).
          var label = function (text, x, y, color) {
            var w = ctx.measureText(text).width, pad = 2 * dpr;
            x = Math.min(x, right - w - pad);
            ctx.fillStyle = "rgba(255, 255, 255, 0.85)";
            ctx.fillRect(x - pad, y - 10 * dpr, w + 2 * pad, 13 * dpr);
            ctx.fillStyle = color;
            ctx.fillText(text, x, y);
          };
          ctx.save();
          ctx.font = (10.5 * dpr) + "px system-ui, sans-serif";
          ctx.textAlign = "left";
          ctx.textBaseline = "alphabetic";
          fired.forEach(function (a, i) {
            var f = Date.parse(a.fired_at), r = a.resolved_at ? Date.parse(a.resolved_at) : null;
            var fx = u.valToPos(f / 1000, "x", true), rx = r == null ? null : u.valToPos(r / 1000, "x", true);
            var x0 = Math.max(left, fx), x1 = rx == null ? right : Math.min(right, rx);
            if (x1 < left || x0 > right) return;
            var row = (14 + 14 * (i % 3)) * dpr;
            ctx.fillStyle = "rgba(239, 68, 68, 0.10)";
            ctx.fillRect(x0, top, Math.max(x1 - x0, 2 * dpr), h);
            ctx.lineWidth = 1.5 * dpr;
            if (fx >= left) {
              ctx.strokeStyle = "#dc2626";
              ctx.setLineDash([]);
              ctx.beginPath(); ctx.moveTo(fx, top); ctx.lineTo(fx, top + h); ctx.stroke();
              label("▲ " + a.rule + " fired " + hhmm(f), fx + 3 * dpr, top + row, "#b91c1c");
            } else {
              label(a.rule + " firing since " + hhmm(f), left + 3 * dpr, top + row, "#b91c1c");
            }
            if (rx != null && rx <= right) {
              ctx.strokeStyle = "#15803d";
              ctx.setLineDash([4 * dpr, 3 * dpr]);
              ctx.beginPath(); ctx.moveTo(rx, top); ctx.lineTo(rx, top + h); ctx.stroke();
              label("resolved " + hhmm(r), rx + 3 * dpr, top + row + 14 * dpr, "#15803d");
            }
          });
          ctx.restore();
        }, function (u) {
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
    el.dataset.alertMarks = String(fired.length);
    var note = $("[data-baseline-note]", el);
    if (note && data.baseline) {
      note.textContent = data.baseline.text;
      el.dataset.baselineFrom = String(data.baseline.from);
      el.dataset.baselineTo = String(data.baseline.to);
    }
    el.dataset.lines = String(lines.length);
    el.dataset.baselines = String(refLines.filter(function (l) { return l.values.some(function (v) { return v != null; }); }).length);
    el.classList.add("drawn");
  }

  // badge says what the panel's rules did in the range, not only their state at its end: firing
  // (since when), else the firings of the range and their resolutions, else ok.
  function badge(el, rule) {
    var b = $("[data-badge]", el);
    if (!b || !rule || rule.state === "none") return;
    var fired = rule.in_range || [];
    var state = rule.state;
    if (state === "ok" && fired.length) state = "fired";
    b.classList.remove("loading", "ok", "pending", "firing", "fired");
    b.classList.add(state);
    b.dataset.state = rule.state;
    b.dataset.fired = String(fired.length);
    var span = function (a) {
      return a.rule + " fired " + hhmm(Date.parse(a.fired_at)) + (a.resolved_at ? ", resolved " + hhmm(Date.parse(a.resolved_at)) : ", still firing");
    };
    var text;
    if (rule.state === "firing" || rule.state === "pending") {
      text = rule.state.toUpperCase() + " · " + rule.rules[0];
      var open = fired.filter(function (a) { return !a.resolved_at; })[0];
      if (open) text += " since " + hhmm(Date.parse(open.fired_at));
      if (fired.length > 1) text += " (" + fired.length + " firings in range)";
    } else if (fired.length) {
      var last = fired[fired.length - 1];
      text = "fired " + hhmm(Date.parse(last.fired_at)) + (last.resolved_at ? " → resolved " + hhmm(Date.parse(last.resolved_at)) : "") + " · " + last.rule;
      if (fired.length > 1) text += " (+" + (fired.length - 1) + ")";
    } else {
      text = "ok · " + rule.rules[0];
    }
    b.textContent = text;
    var alerts = rule.alerts || [];
    var lines = fired.map(span).concat(alerts.map(function (a) { return a.rule + " " + a.state + " at the range's end: " + a.summary; }));
    b.title = lines.length ? lines.join("\n") : "detector rules " + rule.rules.join(", ") + ": nothing fired in this range";
    var p = new URLSearchParams(viewQuery());
    p.set("rule", fired.length ? fired[0].rule : alerts.length ? alerts[0].rule : rule.rules[0]);
    b.href = "/alerts?" + p.toString();
  }

  function load(el) {
    var name = el.dataset.panel;
    return fetch("/api/panel/" + encodeURIComponent(name) + "?" + panelQuery(), { credentials: "same-origin" })
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
