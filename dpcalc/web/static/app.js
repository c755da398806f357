// dpcalc serve: live update, copy buttons, Plotly drawing, jobs (progress, cancel).
// Served from /static/app.js (the CSP allows scripts from this origin only; no inline code).
(function () {
  "use strict";
  var form = document.getElementById("form");
  var timer = null;
  var currentJob = null;
  var seq = 0;

  var curveSeq = 0;

  // Plotly (4.8 MB) is loaded only when a page has something to draw, once, from this origin
  // (a script element with src /static/plotly.min.js: allowed by the CSP's script-src 'self').
  var plotlyLoading = null;

  function withPlotly(then) {
    if (typeof Plotly !== "undefined") { then(); return; }
    if (!plotlyLoading) {
      plotlyLoading = [];
      var s = document.createElement("script");
      s.src = "/static/plotly.min.js";
      s.onload = function () { var q = plotlyLoading; plotlyLoading = null; q.forEach(function (f) { f(); }); };
      s.onerror = function () {
        plotlyLoading = null;
        var div = document.getElementById("plot");
        if (div) { div.setAttribute("data-curve-state", "failed"); }
      };
      document.head.appendChild(s);
    }
    plotlyLoading.push(then);
  }

  function drawPlot() {
    var data = document.getElementById("plot-data");
    var div = document.getElementById("plot");
    if (!data || !div) { return; }
    if (typeof Plotly === "undefined") { withPlotly(drawPlot); return; }
    var fig = JSON.parse(data.textContent);
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false});
    if (div.getAttribute("data-curve")) { drawCurve(div); }
  }

  // The σ and ε pages: after the result (and its bar chart) is shown, fetch the curve the
  // command's --plot draws (GET /api/<page>/plot, computed in a worker, cached) and draw it in
  // its place. #plot's data-curve-state: pending, drawn or failed.
  var curveAbort = null;

  function drawCurve(div) {
    var mine = ++curveSeq;
    var status = document.getElementById("plot-status");
    var url = div.getAttribute("data-curve") + "?" + (form ? query() : window.location.search.slice(1));
    if (curveAbort) { curveAbort.abort(); }  // the page moved on: the server does not start that curve
    curveAbort = typeof AbortController !== "undefined" ? new AbortController() : null;
    fetch(url, curveAbort ? {signal: curveAbort.signal} : {}).then(function (r) { return r.json(); }).then(function (body) {
      if (mine !== curveSeq || !document.body.contains(div)) { return; }
      if (body.ok && body.plot) {
        Plotly.react(div, body.plot.data, body.plot.layout, {responsive: true, displaylogo: false});
        div.setAttribute("data-curve-state", "drawn");
        if (status) { status.textContent = ""; status.hidden = true; }
      } else {
        div.setAttribute("data-curve-state", "failed");
        if (status) { status.textContent = "curve not drawn: " + (body.error || "no data"); }
      }
    }).catch(function (e) {
      if (mine !== curveSeq || (e && e.name === "AbortError")) { return; }
      div.setAttribute("data-curve-state", "failed");
      if (status) { status.textContent = "curve not drawn: " + e; }
    });
  }

  function wireCopy() {
    var buttons = document.querySelectorAll("button.copy");
    Array.prototype.forEach.call(buttons, function (b) {
      b.addEventListener("click", function () {
        var el = document.getElementById(b.getAttribute("data-target"));
        if (!el) { return; }
        var text = el.textContent;
        var done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1200); };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(el); done(); });
        } else { fallbackCopy(el); done(); }
      });
    });
  }

  function fallbackCopy(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    try { document.execCommand("copy"); } catch (e) { /* nothing */ }
  }

  function query() {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) {
      if (typeof value === "string" && value !== "") { params.append(key, value); }
    });
    return params.toString();
  }

  // A link that gives an option more than once (compose's --dp … --count … --gaussian … --count …,
  // risk's several --fpr) cannot be shown in a form of one field per option: the result is the
  // link's own, and so is the share link, until a field is edited (the note says so).
  var repeated = (function () {
    var seen = {}, twice = [];
    new URLSearchParams(window.location.search).forEach(function (v, k) {
      if (seen[k] && twice.indexOf(k) < 0) { twice.push(k); }
      seen[k] = true;
    });
    return twice;
  })();
  var edited = false;

  function setShare() {
    var el = document.getElementById("share-url");
    if (!el) { return; }
    el.textContent = (repeated.length && !edited) ? window.location.href
      : window.location.origin + "/" + form.getAttribute("data-page") + "?" + query();
  }

  function noteRepeated() {
    if (!repeated.length || !form) { return; }
    var note = document.createElement("p");
    note.className = "note";
    note.id = "repeat-note";
    note.textContent = "This link gives " + repeated.map(function (k) { return "--" + k; }).join(", ") +
      " more than once: the form shows the first value of each, while the result and the share link are " +
      "the link's own. Editing a field recomputes from the form's values.";
    form.insertBefore(note, form.firstChild);
  }

  function setStatus(text) {
    var s = document.getElementById("status");
    if (s) { s.textContent = text; }
  }

  function hasUpload() {
    var up = form.getAttribute("data-upload");
    if (!up) { return false; }
    var input = document.getElementById("field-" + up);
    return !!(input && input.files && input.files.length);
  }

  // the request of the last edit only: a newer edit aborts the older request (the server stops
  // a computation whose client has gone)
  var requestAbort = null;

  function request() {
    var page = "/" + form.getAttribute("data-page");
    if (requestAbort) { requestAbort.abort(); }
    requestAbort = typeof AbortController !== "undefined" ? new AbortController() : null;
    var signal = requestAbort ? requestAbort.signal : undefined;
    if (hasUpload()) { return fetch(page, {method: "POST", body: new FormData(form), signal: signal}); }
    return fetch(page + "?" + query(), {method: "GET", signal: signal});
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.getElementById("output");
    var out = document.getElementById("output");
    if (fresh && out) { out.replaceWith(document.importNode(fresh, true)); }
    Array.prototype.forEach.call(document.querySelectorAll(".field-error"), function (el) {
      var name = el.getAttribute("data-for");
      var other = doc.querySelector('.field-error[data-for="' + name + '"]');
      el.textContent = other ? other.textContent : "";
      var wrap = el.closest(".field");
      if (wrap) { wrap.classList.toggle("invalid", el.textContent !== ""); }
    });
    drawPlot();
    setShare();
    wireCopy();
  }

  function refresh() {
    var mine = ++seq;
    edited = true;
    if (curveAbort) { curveAbort.abort(); curveAbort = null; }
    setStatus("computing…");
    if (!hasUpload()) { history.replaceState(null, "", "/" + form.getAttribute("data-page") + "?" + query()); }
    return request().then(function (r) { return r.text(); }).then(function (html) {
      if (mine !== seq) { return; }
      swap(html);
      setStatus("");
    }).catch(function (e) {
      if (mine === seq && !(e && e.name === "AbortError")) { setStatus("request failed: " + e); }
    });
  }

  function showProgress(p) {
    var el = document.getElementById("progress");
    if (el) { el.textContent = p ? (p.done + "/" + p.total) : "running…"; }
  }

  function runJob() {
    var page = form.getAttribute("data-page");
    var body = hasUpload() ? new FormData(form) : new URLSearchParams(query());
    var cancel = document.getElementById("cancel");
    setStatus("");
    showProgress(null);
    if (!hasUpload()) { history.replaceState(null, "", "/" + page + "?" + query()); }
    fetch("/api/jobs/" + page, {method: "POST", body: body}).then(function (r) {
      return r.json().then(function (j) { return {status: r.status, body: j}; });
    }).then(function (res) {
      if (res.status !== 202) { return refresh(); }  // refused input: the page shows the error
      currentJob = res.body.job;
      if (cancel) { cancel.hidden = false; }
      poll(currentJob);
    }).catch(function (e) { setStatus("request failed: " + e); });
  }

  function poll(id) {
    fetch("/api/jobs/" + id).then(function (r) { return r.json(); }).then(function (j) {
      if (id !== currentJob) { return; }
      var cancel = document.getElementById("cancel");
      if (j.state === "running") {
        showProgress(j.progress);
        setTimeout(function () { poll(id); }, 250);
        return;
      }
      currentJob = null;
      if (cancel) { cancel.hidden = true; }
      if (j.state === "cancelled") { showProgress(null); document.getElementById("progress").textContent = "cancelled"; return; }
      if (j.progress) { showProgress(j.progress); } else { document.getElementById("progress").textContent = ""; }
      refresh();  // the result is in the server's cache now: the page renders it at once
    });
  }

  function cancelJob() {
    if (!currentJob) { return; }
    var id = currentJob;
    currentJob = null;
    fetch("/api/jobs/" + id, {method: "DELETE"}).then(function () {
      document.getElementById("cancel").hidden = true;
      document.getElementById("progress").textContent = "cancelled";
    });
  }

  drawPlot();
  wireCopy();
  if (!form) { return; }
  noteRepeated();
  setShare();
  var long = form.getAttribute("data-long") === "true";
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (timer) { clearTimeout(timer); }
    if (long) { runJob(); } else { refresh(); }
  });
  var cancelButton = document.getElementById("cancel");
  if (cancelButton) { cancelButton.addEventListener("click", cancelJob); }
  if (!long) {
    var schedule = function () {
      if (timer) { clearTimeout(timer); }
      timer = setTimeout(refresh, 400);
    };
    form.addEventListener("input", function (ev) { if (ev.target.type !== "file") { schedule(); } });
    form.addEventListener("change", function (ev) { if (ev.target.tagName === "SELECT" || ev.target.type === "checkbox") { schedule(); } });
  }
})();
