// Rollouts page: keeps the table current while rollouts happen. The server
// streams a version (server-sent events); when it changes the table is
// fetched again as JSON and redrawn. Without EventSource it polls.
// Every name is set with textContent: nothing from the cluster is parsed
// as markup.
(function () {
  "use strict";
  var table = document.getElementById("rollouts");
  if (!table) return;
  var status = document.getElementById("live-status");
  var tbody = table.querySelector("tbody");
  var version = table.dataset.version;
  var ruleOrder = [];
  document.querySelectorAll(".legend li").forEach(function (li) {
    var sw = li.querySelector(".swatch");
    if (sw) ruleOrder.push({ cause: sw.className.replace(/.*cause-/, ""), title: li.textContent.trim() });
  });

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function pad(n, w) { n = String(n); while (n.length < w) n = "0" + n; return n; }
  function date(ns) {
    var d = new Date(Number(ns / 1e6));
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1, 2) + "-" + pad(d.getUTCDate(), 2) + " " +
      pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" + pad(d.getUTCSeconds(), 2) + " UTC";
  }
  function dur(ns) {
    var a = Math.abs(ns), s;
    if (a >= 60e9) { // as Go's time.Duration prints it: 2m3s, 1h2m3s
      var h = Math.floor(a / 3600e9), m = Math.floor((a - h * 3600e9) / 60e9);
      s = (h > 0 ? h + "h" : "") + m + "m" + Math.floor((a - h * 3600e9 - m * 60e9) / 1e9) + "s";
    }
    else if (a >= 1e9) s = (a / 1e9).toFixed(3).replace(/0+$/, "").replace(/\.$/, ".0") + " s";
    else if (a >= 1e6) s = Math.round(a / 1e6) + " ms";
    else if (a === 0) s = "0 ms";
    else s = (a / 1e6).toFixed(2) + " ms";
    return (ns < 0 ? "-" : "") + s;
  }
  function offset(ns) { return (ns < 0 ? "" : "+") + dur(ns); }
  function causeTitle(c) {
    for (var i = 0; i < ruleOrder.length; i++) if (ruleOrder[i].cause === c) return ruleOrder[i].title;
    return c;
  }

  function row(r) {
    var tr = el("tr", r.live ? "live" : "");
    var a = el("a", "", r.workload_name ? r.workload_kind + "/" + r.workload_name : "(no workload)");
    a.href = r.links.timeline;
    var td = el("td"); td.appendChild(a); tr.appendChild(td);
    tr.appendChild(el("td", "", r.namespace));
    tr.appendChild(el("td", "trigger", r.trigger || "—"));
    tr.appendChild(el("td", "", date(r.from_ns)));
    tr.appendChild(el("td", "", dur(r.to_ns - r.from_ns)));
    tr.appendChild(el("td", "num", String(r.pods_replaced)));
    tr.appendChild(el("td", "num", r.analysed ? String(r.new_pods) : "…"));
    td = el("td");
    if (!r.analysed) td.appendChild(el("span", "pending", "analysing…"));
    else if (!r.failures && !r.inferred_failures) td.appendChild(el("span", "none", "none"));
    else {
      td.appendChild(el("span", "total", String(r.failures)));
      var causes = Object.keys(r.by_cause || {});
      causes.sort(function (x, y) {
        var ix = ruleOrder.findIndex(function (o) { return o.cause === x; });
        var iy = ruleOrder.findIndex(function (o) { return o.cause === y; });
        return ix - iy;
      });
      causes.forEach(function (c) {
        if (!r.by_cause[c]) return;
        td.appendChild(document.createTextNode(" "));
        var chip = el("span", "chip cause-" + c.replace(/[^a-z0-9_-]/gi, ""), causeTitle(c) + " " + r.by_cause[c]);
        chip.title = causeTitle(c);
        td.appendChild(chip);
      });
      if (r.inferred_failures) {
        td.appendChild(document.createTextNode(" "));
        td.appendChild(el("span", "inferred", "+" + r.inferred_failures + " inferred"));
      }
    }
    tr.appendChild(td);
    td = el("td");
    if (r.worst_sigterm_after_rotation_ns !== undefined) {
      var gap = el("span", r.worst_sigterm_after_rotation_ns < 0 ? "warn" : "", offset(r.worst_sigterm_after_rotation_ns));
      if (r.worst_sigterm_after_rotation_ns < 0) gap.title = "SIGTERM came while a node still routed new connections to the pod";
      td.appendChild(gap);
    }
    tr.appendChild(td);
    td = el("td", "links");
    var t = el("a", "", "timeline"); t.href = r.links.timeline;
    var al = el("a", "", "alignment"); al.href = r.links.alignment;
    td.appendChild(t); td.appendChild(document.createTextNode(" · ")); td.appendChild(al);
    if (r.live) { td.appendChild(document.createTextNode(" ")); td.appendChild(el("span", "badge", "in progress")); }
    tr.appendChild(td);
    return tr;
  }

  var fetching = false;
  function refresh() {
    if (fetching) return;
    fetching = true;
    fetch(table.dataset.api, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (res) { if (!res.ok) throw new Error(res.status + " " + res.statusText); return res.json(); })
      .then(function (data) {
        version = data.version;
        while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
        if (!data.rollouts.length) {
          var tr = el("tr", "empty"), td = el("td", "", "No rollouts match.");
          td.colSpan = 9; tr.appendChild(td); tbody.appendChild(tr);
        }
        data.rollouts.forEach(function (r) { tbody.appendChild(row(r)); });
        status.textContent = "updated " + new Date().toLocaleTimeString() + (data.pending ? " · analysing " + data.pending : "");
      })
      .catch(function (err) { status.textContent = "update failed: " + err.message; })
      .finally(function () { fetching = false; });
  }

  function poll() {
    status.textContent = "polling";
    setInterval(function () {
      fetch(table.dataset.api, { credentials: "same-origin" }).then(function (res) { return res.json(); })
        .then(function (d) { if (d.version !== version) refresh(); }).catch(function () {});
    }, 5000);
  }

  if (window.EventSource) {
    var es = new EventSource(table.dataset.updates);
    var failures = 0;
    es.addEventListener("rollouts", function (ev) {
      failures = 0;
      var d = JSON.parse(ev.data);
      status.textContent = "live" + (d.pending ? " · analysing " + d.pending : "");
      if (d.version !== version) refresh();
    });
    es.onerror = function () {
      // A refused stream (429, 503) is not retried by the browser: poll.
      // One the server ended after its lifetime is retried, and the
      // first event on the new one resets the count.
      if (es.readyState === EventSource.CLOSED || ++failures >= 3) { es.close(); poll(); }
    };
  } else {
    poll();
  }
})();
