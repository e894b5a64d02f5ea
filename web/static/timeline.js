// Rollout timeline: one lane per pod on one time axis, drawn as plain SVG
// from /api/v1/rollouts/…/timeline. The server aggregates what is too dense
// to draw one by one; zooming asks it again for the narrower range, so
// marks split out of the density as the view narrows.
//
// Times from the API are nanoseconds relative to base_ns (exact in a
// JavaScript number); absolute times are built with BigInt for links.
// Every name from the cluster is set with textContent or setAttribute,
// never parsed as markup.
(function () {
  "use strict";
  var root = document.getElementById("timeline");
  if (!root) return;
  var SVGNS = "http://www.w3.org/2000/svg";
  var ds = root.dataset;
  var base = BigInt(ds.base);
  var tooltip = document.getElementById("tooltip");
  var details = document.getElementById("details");
  var detailsBody = document.getElementById("details-body");
  var statusEl = document.getElementById("status");
  var rangeLabel = document.getElementById("range-label");
  var lanesLabel = document.getElementById("lanes-label");
  var lanesPrev = document.getElementById("lanes-prev");
  var lanesNext = document.getElementById("lanes-next");
  var modeSel = document.getElementById("failures-mode");

  var GUTTER = 250, AXIS = 44, LANE = 30, LANES_PX = 360, RIGHT = 14, MIN_SPAN = 1e5; // 0.1 ms
  var data = null;          // last answer
  var view = null;          // {from, to} relative ns being shown
  var laneOffset = 0;
  var selected = null;      // {kind: "f"|"e", i, t, id}
  var hits = [];            // index → {kind, lane, obj}
  var svg = null, plot = null;
  var fetchTimer = null, inflight = null, seq = 0;
  var causes = {};

  // ---------- formatting ----------
  function pad(n, w) { n = String(n); while (n.length < w) n = "0" + n; return n; }
  function dur(ns) {
    var a = Math.abs(ns), s;
    if (a >= 60e9) { var m = Math.floor(a / 60e9); s = m + " min " + ((a - m * 60e9) / 1e9).toFixed(1) + " s"; }
    else if (a >= 1e9) s = (a / 1e9).toFixed(a >= 10e9 ? 1 : 3).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, ".0") + " s";
    else if (a >= 1e6) s = (a / 1e6).toFixed(a >= 10e6 ? 0 : 1).replace(/\.0$/, "") + " ms";
    else if (a === 0) s = "0";
    else s = (a / 1e3).toFixed(0) + " µs";
    return (ns < 0 ? "-" : "") + s;
  }
  function offset(ns) { return (ns < 0 ? "" : "+") + dur(ns); }
  function absNS(rel) { return base + BigInt(Math.round(rel)); }
  function clock(rel, digits) {
    var ns = absNS(rel);
    var ms = Number(ns / 1000000n);
    var d = new Date(ms);
    var frac = pad(Number(ns % 1000000000n) / 1e6 | 0, 3);
    var s = pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" + pad(d.getUTCSeconds(), 2);
    return digits === 0 ? s : s + "." + frac;
  }
  function dateOf(rel) {
    var d = new Date(Number(absNS(rel) / 1000000n));
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1, 2) + "-" + pad(d.getUTCDate(), 2);
  }

  // ---------- DOM helpers ----------
  function s(tag, attrs, parent) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function h(tag, cls, text, parent) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function status(t) { statusEl.textContent = t; }

  // ---------- geometry ----------
  function plotWidth() { return Math.max(200, root.clientWidth - GUTTER - RIGHT); }
  function xOf(t) { return GUTTER + (t - view.from) / (view.to - view.from) * plotWidth(); }
  function tOf(x) { return view.from + (x - GUTTER) / plotWidth() * (view.to - view.from); }

  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= raw) return steps[i] * p;
    return 10 * p;
  }

  // ---------- fetching ----------
  function url() {
    var q = new URLSearchParams();
    if (view) { q.set("from", absNS(view.from).toString()); q.set("to", absNS(view.to).toString()); }
    q.set("width", String(Math.round(plotWidth())));
    if (laneOffset) q.set("lane_offset", String(laneOffset));
    if (modeSel.value) q.set("failures", modeSel.value);
    return ds.api + "?" + q.toString();
  }

  function load() {
    var my = ++seq;
    if (inflight) inflight.abort();
    inflight = new AbortController();
    status("loading…");
    return fetch(url(), { signal: inflight.signal, credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (res) {
        if (!res.ok) return res.json().then(function (e) { throw new Error(e.error || res.statusText); });
        return res.json();
      })
      .then(function (d) {
        if (my !== seq) return;
        data = d;
        causes = {};
        d.causes.forEach(function (c) { causes[c.cause] = c; });
        if (!view) view = { from: d.view.from, to: d.view.to };
        draw();
        var st = d.stats;
        status(st.events_in_view.toLocaleString() + " events in view" +
          (st.aggregated ? " · dense lanes aggregated into " + dur(d.bucket_ns) + " bins" : "") +
          (st.analysis_truncated ? " · analysis kept the first failures only" : ""));
      })
      .catch(function (err) {
        if (err.name === "AbortError") return;
        status("failed: " + err.message);
        if (!data) { root.textContent = ""; h("div", "loading", "Could not load the timeline: " + err.message, root); }
      });
  }

  function scheduleLoad() {
    clearTimeout(fetchTimer);
    fetchTimer = setTimeout(load, 160);
  }

  function setView(from, to, fetchNow) {
    var cap = data ? data.capture : null;
    var span = Math.max(to - from, MIN_SPAN);
    if (cap) {
      var maxSpan = (cap.to - cap.from) * 1.5;
      if (span > maxSpan) span = maxSpan;
      var mid = (from + to) / 2;
      from = mid - span / 2; to = mid + span / 2;
      var lo = cap.from - (cap.to - cap.from) * 0.25, hi = cap.to + (cap.to - cap.from) * 0.25;
      if (from < lo) { to += lo - from; from = lo; }
      if (to > hi) { from -= to - hi; to = hi; }
    } else {
      to = from + span;
    }
    view = { from: from, to: to };
    updateURL();
    draw();
    if (fetchNow) load(); else scheduleLoad();
  }

  function updateURL() {
    var q = new URLSearchParams(location.search);
    q.set("from", absNS(view.from).toString());
    q.set("to", absNS(view.to).toString());
    if (selected) q.set("sel", selected.kind === "f" ? "f:" + selected.i : "e:" + absNS(selected.t) + ":" + selected.id);
    else q.delete("sel");
    history.replaceState(null, "", location.pathname + "?" + q.toString());
  }

  // ---------- drawing ----------
  function draw() {
    if (!data || !view) return;
    hits = [];
    var lanes = data.lanes;
    // Few pods get taller lanes, many get thinner ones.
    LANE = Math.max(22, Math.min(40, Math.floor(LANES_PX / Math.max(lanes.length, 1))));
    var W = root.clientWidth, H = AXIS + Math.max(lanes.length, 1) * LANE + 10;
    var pw = plotWidth();
    root.textContent = "";
    svg = s("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "rollout timeline" }, root);
    var defs = s("defs", {}, svg);
    var clip = s("clipPath", { id: "plot-clip" }, defs);
    s("rect", { x: GUTTER, y: 0, width: pw, height: H }, clip);

    // Axis.
    var axis = s("g", { "class": "tl-axis" }, svg);
    var span = view.to - view.from;
    var step = niceStep(span, Math.max(3, Math.floor(pw / 110)));
    var first = Math.ceil(view.from / step) * step;
    for (var t = first; t <= view.to; t += step) {
      var x = xOf(t);
      s("line", { x1: x, x2: x, y1: AXIS - 6, y2: H }, axis);
      var lbl = s("text", { x: x, y: 15, "text-anchor": "middle" }, axis);
      lbl.textContent = offset(t);
      var ab = s("text", { x: x, y: 28, "text-anchor": "middle", "class": "abs" }, axis);
      ab.textContent = clock(t, step >= 1e9 ? 0 : 3);
    }
    var head = s("text", { x: 8, y: 15 }, axis);
    head.textContent = "from rollout start";
    var head2 = s("text", { x: 8, y: 28, "class": "abs" }, axis);
    head2.textContent = dateOf(view.from) + " UTC";
    rangeLabel.textContent = clock(view.from) + " – " + clock(view.to) + " UTC (" + dur(span) + ")";

    var laneG = s("g", {}, svg);
    plot = s("g", { "clip-path": "url(#plot-clip)" }, svg);
    if (!lanes.length) {
      var empty = s("text", { x: GUTTER + 10, y: AXIS + 18 }, laneG);
      empty.textContent = "No pod has events in this range.";
    }
    lanes.forEach(function (l, i) { drawLane(l, i, laneG, plot); });

    // Lane paging.
    var total = data.lanes_total, off = data.lane_offset;
    lanesLabel.textContent = total > lanes.length ? " pods " + (off + 1) + "–" + (off + lanes.length) + " of " + total + " " :
      (total ? total + " pods " : "");
    lanesPrev.hidden = off === 0;
    lanesNext.hidden = off + lanes.length >= total;
  }

  function laneY(i) { return AXIS + i * LANE; }

  function drawLane(l, i, labels, g) {
    var y = laneY(i), mid = y + LANE / 2, ph = l.phases;
    var lg = s("g", { "class": "tl-lane", "data-lane": i }, labels);
    if (i % 2 === 0) s("rect", { x: 0, y: y, width: root.clientWidth, height: LANE, fill: "#fbfbfc" }, lg);
    var name = l.pod.name || l.key;
    var maxChars = 30;
    var named = s("g", {}, lg);
    var title = s("title", {}, named);
    title.textContent = (l.pod.namespace ? l.pod.namespace + "/" : "") + name + (l.node ? " on " + l.node : "");
    var nameEl = s("text", { x: 8, y: mid + 4, "class": "name" }, named);
    nameEl.textContent = name.length > maxChars ? name.slice(0, maxChars - 1) + "…" : name;
    var role = s("text", { x: GUTTER - 8, y: mid + 4, "text-anchor": "end", "class": "role", fill: l.role === "new" ? "#15803d" : "#6b7280" }, lg);
    role.textContent = l.role;

    var lane = s("g", { "class": "tl-lane" }, g);
    // Life of the pod: first event (or creation) to its last.
    // A pod created before the recorded window was alive from its left
    // edge; one that never ended lives on past the right.
    var start = ph.created !== undefined ? Math.min(ph.created, l.span.from) : (l.role === "old" ? data.capture.from : l.span.from);
    var end = l.span.to, ended = false;
    [ph.exit, ph.sigkill, ph.container_terminated].forEach(function (v) { if (v !== undefined) { ended = true; if (v > end) end = v; } });
    if (l.spreads) l.spreads.forEach(function (sp) { if (sp.kind === "endpoint_removed") ended = true; if (sp.last > end) end = sp.last; });
    if (!ended && ph.deletion === undefined) end = data.capture.to;
    var x0 = Math.max(xOf(start), GUTTER - 2), x1 = Math.min(xOf(end), GUTTER + plotWidth() + 2);
    if (x1 > x0) s("rect", { x: x0, y: y + 4, width: Math.max(x1 - x0, 1), height: LANE - 8, rx: 3, "class": "bg" + (l.role === "new" ? " new" : "") }, lane);
    // preStop: deletion to SIGTERM.
    if (ph.deletion !== undefined && ph.sigterm !== undefined && ph.sigterm > ph.deletion) {
      hit(s("rect", { x: xOf(ph.deletion), y: y + 4, width: Math.max(xOf(ph.sigterm) - xOf(ph.deletion), 1), height: LANE - 8, "class": "m-prestop" }, lane),
        { kind: "prestop", lane: l, from: ph.deletion, to: ph.sigterm });
    }
    // Endpoint spreads across nodes (bottom strip).
    (l.spreads || []).forEach(function (sp) {
      if (sp.kind === "endpoint_terminating") return; // drawn with not_ready; its ticks show
      if (sp.kind === "dataplane_removed") { // top strip: the nodes' proxy rules dropping it
        hit(s("rect", { x: xOf(sp.first), y: y + 4, width: Math.max(xOf(sp.last) - xOf(sp.first), 2), height: 3, "class": "m-dataplane" }, lane),
          { kind: "spread", lane: l, obj: sp });
        return;
      }
      var yy = sp.kind === "endpoint_removed" ? y + LANE - 7 : y + LANE - 10;
      var hh = sp.kind === "endpoint_removed" ? 3 : 3;
      hit(s("rect", { x: xOf(sp.first), y: yy, width: Math.max(xOf(sp.last) - xOf(sp.first), 2), height: hh, "class": "m-spread",
        fill: sp.kind === "endpoint_removed" ? "#1d4ed8" : sp.kind === "out_of_rotation" ? "#60a5fa" : "#93c5fd" }, lane),
        { kind: "spread", lane: l, obj: sp });
    });
    // Density is drawn as a mirrored histogram on the lane's midline:
    // failures (by cause) above it, connection closes and resets below.
    var bw = data.bucket_ns, half = LANE / 2 - 4;
    function bars(series, colorOf, up, opacity) {
      var peak = densityPeak(series), stack = {};
      series.forEach(function (se) {
        var d = "";
        se.bins.forEach(function (b) {
          var hgt = Math.max(1.5, half * Math.sqrt(b[1] / peak));
          var off = stack[b[0]] || 0;
          var bx = xOf(data.view.from + b[0] * bw), bx2 = xOf(data.view.from + (b[0] + 1) * bw);
          var w = Math.max(bx2 - bx - 0.3, 1);
          var top = up ? mid - 1 - off - hgt : mid + 1 + off;
          d += "M" + bx.toFixed(1) + " " + top.toFixed(1) + "h" + w.toFixed(1) + "v" + hgt.toFixed(1) + "h-" + w.toFixed(1) + "z";
          stack[b[0]] = off + hgt;
        });
        s("path", { d: d, fill: colorOf(se.name), opacity: opacity }, lane);
      });
    }
    var sockColors = { close: "#94a3b8", close_at_exit: "#475569", rst: "#dc2626", refused: "#f97316" };
    if (l.socket_density) bars(l.socket_density, function (n) { return sockColors[n] || "#94a3b8"; }, false, 0.85);
    if (l.failure_density) bars(l.failure_density, function (n) { return (causes[n] || {}).color || "#56B4E9"; }, true, 0.95);
    // Individual socket events: thin ticks below the midline.
    (l.sockets || []).forEach(function (k) {
      var cls = k.series === "rst" || k.series === "refused" ? "m-rst" : "m-fin";
      var x = xOf(k.t);
      hit(s("rect", { x: x - 0.75, y: mid + 1, width: 1.5, height: half, "class": cls, opacity: k.series === "close" ? 0.6 : 1 }, lane),
        { kind: "sock", lane: l, obj: k });
    });
    // Each node's proxy rules: a tick on the top strip when they began
    // (hollow) and stopped (filled) sending to the pod.
    (l.dataplane || []).forEach(function (d) {
      hit(s("rect", { x: xOf(d.t) - 1, y: y + 2, width: 2, height: 7, "class": "m-dataplane" + (d.in_rotation ? " in" : "") }, lane),
        { kind: "dataplane", lane: l, obj: d });
    });
    // Lifecycle marks.
    l.marks.forEach(function (m) { drawMark(m, l, y, lane); });
    // Recorder gaps over the lane: its node's, and the EndpointSlices'.
    (data.recorder_gaps || []).forEach(function (gp) {
      if (gp.node !== "" && gp.node !== l.node) return;
      var gx0 = Math.max(xOf(gp.from), GUTTER), gx1 = Math.min(xOf(gp.to), GUTTER + plotWidth());
      if (gx1 <= gx0) return;
      hit(s("rect", { x: gx0, y: y + 1, width: Math.max(gx1 - gx0, 2), height: LANE - 2, "class": "m-gap" }, lane),
        { kind: "gap", lane: l, obj: gp });
    });
    // Individual failures: circles above the midline, coloured by cause;
    // inferred ones hollow.
    var fy = l.sockets || l.socket_density ? mid - half / 2 : mid;
    var fr = Math.min(5, Math.max(3.5, LANE / 6));
    (l.failure_marks || []).forEach(function (f) {
      var c = (causes[f.cause] || {}).color || "#56B4E9";
      var el = s("circle", { cx: xOf(f.t), cy: fy, r: fr, "class": "tl-hit",
        fill: f.inferred ? "#fff" : c, stroke: f.inferred ? c : "#fff", "stroke-width": f.inferred ? 2 : 1,
        "data-failure": f.i }, lane);
      hit(el, { kind: "failure", lane: l, obj: f });
      if (selected && selected.kind === "f" && selected.i === f.i) s("circle", { cx: xOf(f.t), cy: fy, r: fr + 3.5, "class": "tl-sel" }, lane);
    });
    s("line", { x1: GUTTER, x2: GUTTER + plotWidth(), y1: y + LANE, y2: y + LANE, "class": "sep", stroke: "#eef0f3" }, lane);
  }

  function densityPeak(series) {
    var tot = {}, peak = 1;
    series.forEach(function (se) { se.bins.forEach(function (b) { tot[b[0]] = (tot[b[0]] || 0) + b[1]; }); });
    for (var k in tot) if (tot[k] > peak) peak = tot[k];
    return peak;
  }

  function drawMark(m, l, y, g) {
    var x = xOf(m.t), el;
    var top = y + 3, bot = y + LANE - 3, mid = y + LANE / 2;
    switch (m.kind) {
      case "pod_deletion":
        el = s("path", { d: "M" + (x - 5) + " " + top + "h10l-5 8z", "class": "m-deletion" }, g); break;
      case "signal":
        if (m.signal === 9) el = s("path", { d: "M" + (x - 5) + " " + (mid - 5) + "l10 10M" + (x + 5) + " " + (mid - 5) + "l-10 10", "class": "m-kill" }, g);
        else if (m.signal === 15) el = s("rect", { x: x - 1.5, y: y + 1, width: 3, height: LANE - 2, "class": "m-sigterm" }, g);
        else el = s("rect", { x: x - 1, y: y + 5, width: 2, height: LANE - 10, "class": "m-other" }, g);
        break;
      case "process_exit":
        el = s("rect", { x: x - 4.5, y: mid - 4.5, width: 9, height: 9, "class": "m-exit" }, g); break;
      case "container_terminated":
        el = s("rect", { x: x - 3.5, y: mid - 3.5, width: 7, height: 7, fill: "#fff", stroke: "#111827", "stroke-width": 1.5 }, g); break;
      case "listener_closed":
        el = s("path", { d: "M" + x + " " + (mid - 6) + "l6 6-6 6-6-6z", "class": "m-listener" }, g); break;
      case "pod_created":
        el = s("circle", { cx: x, cy: mid, r: 3, fill: "#fff", stroke: "#16a34a", "stroke-width": 1.5 }, g); break;
      case "pod_ready": case "endpoint_ready": case "endpoint_serving": case "endpoint_added":
        el = s("rect", { x: x - 1, y: bot - 8, width: 2, height: 8, "class": "m-ready" }, g); break;
      case "endpoint_not_ready": case "endpoint_terminating": case "endpoint_removed": case "endpoint_not_serving": case "pod_not_ready":
        el = s("rect", { x: x - 1, y: bot - 8, width: 2, height: 8, "class": "m-endpoint",
          fill: m.kind === "endpoint_removed" ? "#1d4ed8" : "#60a5fa" }, g); break;
      default:
        el = s("rect", { x: x - 1, y: mid - 4, width: 2, height: 8, "class": "m-other" }, g);
    }
    hit(el, { kind: "mark", lane: l, obj: m });
    if (selected && selected.kind === "e" && selected.id === m.id) s("circle", { cx: x, cy: mid, r: 9, "class": "tl-sel" }, g);
  }

  function hit(el, info) {
    el.setAttribute("data-hit", hits.length);
    el.classList.add("tl-hit");
    hits.push(info);
  }

  // ---------- hover ----------
  var kindNames = {
    pod_created: "pod created", pod_deletion: "deletion", pod_ready: "pod ready", pod_not_ready: "pod not ready",
    container_terminated: "container terminated", signal: "signal", process_exit: "exit", listener_closed: "listener closed",
    conn_closed: "connection closed (FIN)", rst_sent: "RST sent", rst_received: "RST received", conn_refused: "connection refused",
    proxy_state: "proxy (its own log)"
  };

  function relTo(l, t) {
    var ph = l.phases, parts = [];
    if (ph.sigterm !== undefined) parts.push(offset(t - ph.sigterm) + " from SIGTERM");
    if (ph.exit !== undefined) parts.push(offset(t - ph.exit) + " from exit");
    return parts.join(" · ");
  }

  function tip(lines, ev) {
    tooltip.textContent = "";
    lines.forEach(function (ln, i) { h("div", i === 0 ? "tt-title" : "tt-sub", ln, tooltip); });
    tooltip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var r = tooltip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 8) x = ev.clientX - r.width - 14;
    if (y + r.height > window.innerHeight - 8) y = ev.clientY - r.height - 14;
    tooltip.style.left = x + "px";
    tooltip.style.top = y + "px";
  }

  function hoverLines(info) {
    var l = info.lane, o = info.obj, pod = l.pod.name;
    switch (info.kind) {
      case "failure":
        var c = causes[o.cause] || { title: o.cause };
        return [(o.inferred ? "inferred " : "") + "failure: " + c.title, o.class + " on " + pod + " at " + clock(o.t), relTo(l, o.t), "click for the evidence and the fix"];
      case "mark":
        return [o.label, pod + " at " + clock(o.t) + (o.node ? " (seen on " + o.node + ")" : ""), relTo(l, o.t)];
      case "sock":
        return [kindNames[o.kind] + (o.series === "close_at_exit" ? " at exit" : ""), pod + " at " + clock(o.t), relTo(l, o.t)];
      case "prestop":
        return ["preStop: " + dur(info.to - info.from), pod + ": deletion " + clock(info.from) + " → SIGTERM " + clock(info.to)];
      case "dataplane":
        return [(o.node ? o.node + "'s" : "a node's") + " proxy rules " + (o.in_rotation ? "began" : "stopped") + " sending " + (o.service || "the Service") + " to it",
          pod + " at " + clock(o.t), relTo(l, o.t)];
      case "gap":
        return ["record incomplete: nothing here is evidence", o.text, "failures in it are unexplained"];
      case "spread":
        var nn = o.node_count || o.nodes.length;
        return [o.kind.replace(/_/g, " ") + " across " + nn + " node" + (nn === 1 ? "" : "s"),
          "first " + clock(o.first) + ", last " + clock(o.last) + " (spread " + dur(o.last - o.first) + ")", o.nodes.slice(0, 8).join(", ") + (nn > 8 ? " …" : "")];
    }
    return [];
  }

  function densityAt(l, t) {
    if (!data) return null;
    var b = Math.floor((t - data.view.from) / data.bucket_ns), out = [];
    (l.failure_density || []).forEach(function (se) {
      se.bins.forEach(function (x) { if (x[0] === b) out.push(x[1] + " " + ((causes[se.name] || {}).title || se.name)); });
    });
    (l.socket_density || []).forEach(function (se) {
      se.bins.forEach(function (x) { if (x[0] === b) out.push(x[1] + " " + se.name.replace(/_/g, " ")); });
    });
    if (!out.length) return null;
    var from = data.view.from + b * data.bucket_ns;
    return [out.join(", "), l.pod.name + " " + clock(from) + " – " + clock(from + data.bucket_ns), "click to zoom in"];
  }

  function laneAt(ev) {
    var r = svg.getBoundingClientRect();
    var i = Math.floor((ev.clientY - r.top - AXIS) / LANE);
    return data && i >= 0 && i < data.lanes.length ? data.lanes[i] : null;
  }

  root.addEventListener("mousemove", function (ev) {
    if (drag || !svg) return;
    var t = ev.target.closest ? ev.target.closest("[data-hit]") : null;
    if (t) { tip(hoverLines(hits[+t.getAttribute("data-hit")]), ev); return; }
    var r = svg.getBoundingClientRect(), x = ev.clientX - r.left;
    var l = x > GUTTER ? laneAt(ev) : null;
    var lines = l ? densityAt(l, tOf(x)) : null;
    if (lines) tip(lines, ev); else tooltip.hidden = true;
  });
  root.addEventListener("mouseleave", function () { tooltip.hidden = true; });

  // ---------- click: details ----------
  function dl(parent, rows) {
    var d = h("dl", "", null, parent);
    rows.forEach(function (r) {
      if (r[1] === undefined || r[1] === null || r[1] === "") return;
      h("dt", "", r[0], d);
      h("dd", "", String(r[1]), d);
    });
    return d;
  }

  function eventRows(e) {
    var rows = [["time", e.time], ["kind", e.kind], ["node", e.node], ["source", e.source],
      ["pod", e.pod ? e.pod.namespace + "/" + e.pod.name : ""], ["container", e.pod ? e.pod.container : ""], ["workload", e.workload],
      ["process", e.comm ? e.comm + (e.pid ? " (pid " + e.pid + ")" : "") : ""], ["sender", e.peer_comm ? e.peer_comm + " (pid " + e.peer_pid + ")" : ""],
      ["signal", e.signal], ["code", e.code], ["duration", e.duration_ns ? dur(e.duration_ns) : ""],
      ["local", e.local], ["remote", e.remote], ["netns", e.netns], ["service", e.service], ["slice", e.slice], ["reason", e.reason],
      ["flags", e.flags ? e.flags.join(", ") : ""], ["id", e.id]];
    if (e.attrs) Object.keys(e.attrs).sort().forEach(function (k) { rows.push([k, e.attrs[k]]); });
    return rows;
  }

  function showDetails(build) {
    detailsBody.textContent = "";
    details.hidden = false;
    build(detailsBody);
  }

  function openFailure(i) {
    selected = { kind: "f", i: i };
    updateURL(); draw();
    showDetails(function (b) { h("p", "sub", "loading…", b); });
    fetch(ds.failures + "/" + i, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status === 404 ? "this failure is no longer in the rollout" : r.statusText);
      return r.json();
    }).then(function (f) {
      showDetails(function (b) {
        var head = h("h3", "", null, b);
        var chip = h("span", "chip", f.title, head);
        chip.style.background = f.color;
        if (f.inferred) h("span", "inferred", " inferred from kernel evidence (" + (f.proof || "") + ")", head);
        h("p", "", f.explanation, b);
        var c = causes[f.cause];
        if (c && c.fix) { var fx = h("div", "fix", null, b); h("strong", "", "Fix: ", fx); fx.appendChild(document.createTextNode(c.fix)); }
        if (f.evidence && f.evidence.length) {
          h("strong", "", "Evidence", b);
          var ul = h("ul", "", null, b);
          f.evidence.forEach(function (ev) { h("li", "", ev.role + ": " + ev.event.summary + " (" + offset(ev.offset_ns) + ")", ul); });
        }
        if (f.missing && f.missing.length) {
          h("strong", "", "Not shown", b);
          var um = h("ul", "", null, b);
          f.missing.forEach(function (m) { h("li", "", m, um); });
        }
        var near = [];
        if (f.before) near.push("before: " + f.before.event.summary + " (" + offset(f.before.offset_ns) + ")");
        if (f.after) near.push("after: " + f.after.event.summary + " (" + offset(f.after.offset_ns) + ")");
        if (near.length) { h("strong", "", "Nearest events", b); var un = h("ul", "", null, b); near.forEach(function (n) { h("li", "", n, un); }); }
        var offs = f.offsets_ns || {};
        dl(b, [["from SIGTERM", offs.from_sigterm !== undefined ? offset(offs.from_sigterm) : ""],
          ["from exit", offs.from_exit !== undefined ? offset(offs.from_exit) : ""],
          ["from deletion", offs.from_deletion !== undefined ? offset(offs.from_deletion) : ""],
          ["pod found by", f.via]]);
        h("strong", "", "The failure", b);
        dl(b, eventRows(f.failure));
      });
    }).catch(function (err) { showDetails(function (b) { h("p", "warn", err.message, b); }); });
  }

  function openEvent(t, id) {
    selected = { kind: "e", t: t, id: id };
    updateURL(); draw();
    showDetails(function (b) { h("p", "sub", "loading…", b); });
    fetch(ds.events + "/" + absNS(t).toString() + "/" + encodeURIComponent(id), { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.statusText);
      return r.json();
    }).then(function (e) {
      showDetails(function (b) {
        h("h3", "", e.summary, b);
        dl(b, eventRows(e));
      });
    }).catch(function (err) { showDetails(function (b) { h("p", "warn", err.message, b); }); });
  }

  document.getElementById("details-close").addEventListener("click", function () {
    details.hidden = true; selected = null; updateURL(); draw();
  });

  root.addEventListener("click", function (ev) {
    if (moved) return;
    var t = ev.target.closest ? ev.target.closest("[data-hit]") : null;
    if (t) {
      var info = hits[+t.getAttribute("data-hit")];
      if (info.kind === "failure") openFailure(info.obj.i);
      else if (info.kind === "mark" || info.kind === "sock") openEvent(info.obj.t, info.obj.id);
      else if (info.kind === "prestop") setView(info.from - (info.to - info.from) * 0.3, info.to + (info.to - info.from) * 0.3, true);
      else if (info.kind === "spread") { var sp = info.obj, w = Math.max(sp.last - sp.first, 2e7); setView(sp.first - w * 0.5, sp.last + w * 0.5, true); }
      return;
    }
    // A click on density zooms into its bin.
    var r = svg.getBoundingClientRect(), x = ev.clientX - r.left;
    var l = x > GUTTER ? laneAt(ev) : null;
    if (l && densityAt(l, tOf(x))) {
      var b = Math.floor((tOf(x) - data.view.from) / data.bucket_ns), from = data.view.from + b * data.bucket_ns;
      setView(from - data.bucket_ns * 2, from + data.bucket_ns * 3, true);
    }
  });

  // ---------- zoom and pan ----------
  function zoom(factor, atX) {
    var t = atX === undefined ? (view.from + view.to) / 2 : tOf(atX);
    setView(t - (t - view.from) * factor, t + (view.to - t) * factor);
  }
  root.addEventListener("wheel", function (ev) {
    if (!svg) return;
    var r = svg.getBoundingClientRect(), x = ev.clientX - r.left;
    if (x < GUTTER) return;
    if (Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) { // horizontal scroll pans
      ev.preventDefault();
      var dt = ev.deltaX / plotWidth() * (view.to - view.from);
      setView(view.from + dt, view.to + dt);
      return;
    }
    ev.preventDefault();
    zoom(Math.pow(1.0015, ev.deltaY), x);
  }, { passive: false });

  var drag = null, moved = false;
  root.addEventListener("mousedown", function (ev) {
    if (ev.button !== 0 || !svg) return;
    var r = svg.getBoundingClientRect();
    if (ev.clientX - r.left < GUTTER) return;
    drag = { x: ev.clientX, from: view.from, to: view.to };
    moved = false;
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    var dx = ev.clientX - drag.x;
    if (Math.abs(dx) > 3) { moved = true; svg.classList.add("dragging"); tooltip.hidden = true; }
    if (!moved) return;
    var dt = -dx / plotWidth() * (drag.to - drag.from);
    view = { from: drag.from + dt, to: drag.to + dt };
    draw();
    svg.classList.add("dragging");
  });
  window.addEventListener("mouseup", function () {
    if (!drag) return;
    drag = null;
    if (moved) { setView(view.from, view.to); setTimeout(function () { moved = false; }, 0); }
  });
  root.addEventListener("keydown", function (ev) {
    var span = view.to - view.from;
    switch (ev.key) {
      case "+": case "=": zoom(0.5); break;
      case "-": zoom(2); break;
      case "0": reset(); break;
      case "ArrowLeft": setView(view.from - span * 0.2, view.to - span * 0.2); break;
      case "ArrowRight": setView(view.from + span * 0.2, view.to + span * 0.2); break;
      case "Escape": details.hidden = true; selected = null; updateURL(); draw(); break;
      default: return;
    }
    ev.preventDefault();
  });
  function reset() { if (data) setView(data.extent.from, data.extent.to, true); }
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("zoom-reset").addEventListener("click", reset);
  modeSel.addEventListener("change", function () { load(); });
  lanesPrev.addEventListener("click", function () { laneOffset = Math.max(0, laneOffset - data.lanes.length); load(); });
  lanesNext.addEventListener("click", function () { laneOffset += data.lanes.length; load(); });
  // Redraw when the drawing's width changes: the window resizes, or the
  // details panel opens or closes beside it.
  var lastWidth = root.clientWidth, resizeTimer = null;
  function resized() {
    if (Math.abs(root.clientWidth - lastWidth) < 2) return;
    lastWidth = root.clientWidth;
    draw();
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(scheduleLoad, 120);
  }
  if (window.ResizeObserver) new ResizeObserver(resized).observe(root);
  else window.addEventListener("resize", resized);

  // ---------- start ----------
  if (ds.from && ds.to) {
    try { view = { from: Number(BigInt(ds.from) - base), to: Number(BigInt(ds.to) - base) }; } catch (e) { view = null; }
  }
  root.textContent = "";
  h("div", "loading", "Reading the rollout…", root);
  load().then(function () {
    var sel = ds.sel || "";
    var m = /^f:(\d+)$/.exec(sel);
    if (m) openFailure(+m[1]);
    m = /^e:(\d+):([0-9a-f]+)$/.exec(sel);
    if (m) openEvent(Number(BigInt(m[1]) - base), m[2]);
  });

  // A rollout in progress: read it again when the server says it changed.
  if (ds.live === "true" && window.EventSource) {
    var es = new EventSource(ds.updates), version = null;
    es.addEventListener("rollouts", function (ev) {
      var d = JSON.parse(ev.data);
      if (version !== null && d.version !== version) scheduleLoad();
      version = d.version;
    });
  }
})();
