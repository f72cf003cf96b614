// rezuscloud panel: progressive enhancement of server-rendered pages.
// Without this file every page and form works (forms post and redirect);
// with it, actions answer in place, pages follow the engine live over
// server-sent events, and the panel takes Home Assistant's theme.
"use strict";
(function () {
  var doc = document;
  var meta = function (n) { var m = doc.querySelector('meta[name="' + n + '"]'); return m ? m.content : ""; };
  var token = meta("panel-token");
  var url = function (rel) { return new URL(rel, doc.baseURI).href; };

  // --- Home Assistant's theme (the ingress page is of the same origin as
  // its frame, so the frame's CSS variables can be read).
  var themeMap = {
    "--bg": "--primary-background-color", "--card": "--card-background-color",
    "--fg": "--primary-text-color", "--muted": "--secondary-text-color", "--border": "--divider-color",
    "--primary": "--primary-color", "--on-primary": "--text-primary-color", "--bad": "--error-color",
    "--ok": "--success-color", "--warn": "--warning-color", "--busy": "--info-color",
    "--code": "--secondary-background-color"
  };
  function parentRoot() {
    try {
      if (window.parent !== window && window.parent.document) return window.parent.document.documentElement;
    } catch (e) { /* another origin: keep the system's scheme */ }
    return null;
  }
  function luminance(c) {
    var m = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(c);
    if (!m) return -1;
    return (0.299 * m[1] + 0.587 * m[2] + 0.114 * m[3]) / 255;
  }
  function applyTheme() {
    var root = parentRoot();
    if (!root) return;
    var cs = window.parent.getComputedStyle(root), st = doc.documentElement.style, any = false;
    Object.keys(themeMap).forEach(function (k) {
      var v = cs.getPropertyValue(themeMap[k]).trim();
      if (v) { st.setProperty(k, v); any = true; } else { st.removeProperty(k); }
    });
    var font = cs.getPropertyValue("--ha-font-family-body").trim() || cs.getPropertyValue("--paper-font-body1_-_font-family").trim();
    if (font) st.setProperty("--font", font);
    if (any) {
      // form controls and scrollbars follow the theme's lightness
      var probe = doc.createElement("span");
      probe.style.color = cs.getPropertyValue("--primary-background-color").trim();
      doc.body.appendChild(probe);
      var l = luminance(getComputedStyle(probe).color);
      probe.remove();
      if (l >= 0) st.colorScheme = l < 0.5 ? "dark" : "light";
      doc.documentElement.dataset.haTheme = "1";
    }
  }
  function watchTheme() {
    var root = parentRoot();
    if (!root) return;
    applyTheme();
    try {
      new MutationObserver(applyTheme).observe(root, { attributes: true, attributeFilter: ["style", "class"] });
    } catch (e) { /* no observer across frames: theme read once */ }
    if (window.matchMedia) window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);
  }

  // --- answers in place
  var toastTimer;
  function toast(msg, bad) {
    var t = doc.getElementById("toast");
    if (!t) return;
    t.textContent = msg;
    t.className = "notice" + (bad ? " bad" : " ok");
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { t.hidden = true; }, bad ? 12000 : 6000);
  }
  function post(form, submitter) {
    var body = new URLSearchParams(new FormData(form, submitter));
    var btn = submitter || form.querySelector("button");
    if (btn) { btn.disabled = true; btn.classList.add("busy"); }
    return fetch(form.action, {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "Accept": "application/json", "X-Panel-Token": token }
    }).then(function (r) {
      return r.json().catch(function () { return { status: "error", error: "HTTP " + r.status }; });
    }).then(function (j) {
      toast(j.message || j.error || j.status, j.status !== "ok");
      if (j.status === "ok") delete form.dataset.dirty;
      return j;
    }, function (e) {
      toast("The add-on did not answer: " + e.message, true);
    }).finally(function () {
      if (btn) { btn.classList.remove("busy"); btn.disabled = false; confirmState(form); }
      refresh();
    });
  }
  function confirmState(form) {
    var name = form.dataset.confirm;
    if (!name) return;
    var input = form.querySelector('input[name="confirm"]'), btn = form.querySelector("button");
    if (input && btn && !btn.title) btn.disabled = input.value !== name;
  }
  doc.addEventListener("submit", function (ev) {
    var f = ev.target;
    if (!f.hasAttribute("data-action")) return;
    ev.preventDefault();
    post(f, ev.submitter);
  });
  doc.addEventListener("input", function (ev) {
    var f = ev.target.form;
    if (!f) return;
    f.dataset.dirty = "1";
    confirmState(f);
  });

  // --- live parts: on a change the page fetches itself again and swaps
  // the elements marked data-live (not one the user is working in)
  var refreshing = false, again = false;
  var focusable = "a[href], button, input, select, textarea, summary";
  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var next = new DOMParser().parseFromString(html, "text/html");
        doc.querySelectorAll("[data-live]").forEach(function (el) {
          var n = next.getElementById(el.id);
          if (!n) return;
          var a = doc.activeElement;
          if (a && el.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return;
          if (el.querySelector("form[data-dirty]")) return;
          var key = el.dataset.key, idx = -1;
          if (a && el.contains(a)) idx = Array.prototype.indexOf.call(el.querySelectorAll(focusable), a);
          el.replaceWith(n);
          if (idx >= 0) { var f = n.querySelectorAll(focusable)[idx]; if (f) f.focus(); }
          if (n.id === "plan-head" && n.dataset.key !== key) loadPlan();
        });
        doc.querySelectorAll("form[data-confirm]").forEach(confirmState);
      })
      .catch(function () {})
      .finally(function () { refreshing = false; if (again) { again = false; refresh(); } });
  }

  // --- the pending plan (loaded apart: tofu show takes a moment)
  function loadPlan() {
    var el = doc.getElementById("plan");
    if (!el || !el.dataset.src) return;
    fetch(url(el.dataset.src), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (html) { el.innerHTML = html; })
      .catch(function (e) { el.textContent = "The plan could not be loaded: " + e.message; });
  }

  // --- the log
  function logItem(l) {
    var li = doc.createElement("li");
    li.className = "lvl-" + l.level;
    var t = doc.createElement("time");
    t.dateTime = l.at; t.textContent = l.clock;
    li.appendChild(t);
    [["src", l.src], ["op", l.op], ["txt", l.text]].forEach(function (p) {
      li.appendChild(doc.createTextNode(" "));
      var s = doc.createElement("span");
      s.className = p[0]; s.textContent = p[1];
      li.appendChild(s);
    });
    return li;
  }
  function addLines(lines, reset) {
    var log = doc.getElementById("log");
    if (!log) return;
    var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
    if (reset) log.textContent = "";
    var none = log.querySelector(".none");
    if (none && lines.length) none.remove();
    lines.forEach(function (l) { log.appendChild(logItem(l)); });
    while (log.children.length > 400) log.firstElementChild.remove();
    if (!log.children.length) {
      var li = doc.createElement("li");
      li.className = "none"; li.textContent = log.dataset.empty;
      log.appendChild(li);
    }
    if (atEnd || reset) log.scrollTop = log.scrollHeight;
  }

  // --- the page's event stream
  function stream() {
    var rel = meta("panel-stream");
    if (!rel || !window.EventSource) return;
    var es = new EventSource(url(rel)), conn = doc.getElementById("conn");
    es.onopen = function () { if (conn) { conn.classList.add("on"); conn.title = "Live"; } };
    es.onerror = function () { if (conn) { conn.classList.remove("on"); conn.title = "Reconnecting…"; } };
    es.addEventListener("change", refresh);
    es.addEventListener("reset", function (ev) { addLines(JSON.parse(ev.data), true); });
    es.addEventListener("line", function (ev) { addLines([JSON.parse(ev.data)], false); });
  }

  // --- the new-cluster form shows the chosen provider's fields only
  function providerFields() {
    var sel = doc.querySelector("[data-provider-select]");
    if (!sel) return;
    var show = function () {
      doc.querySelectorAll("[data-provider]").forEach(function (el) { el.hidden = el.dataset.provider !== sel.value; });
    };
    sel.addEventListener("change", show);
    show();
  }

  // --- the editor: a problem's location selects its line
  doc.addEventListener("click", function (ev) {
    var b = ev.target.closest && ev.target.closest("button[data-line]");
    if (!b) return;
    var ta = doc.getElementById("text"), n = +b.dataset.line;
    if (!ta || !n) return;
    var lines = ta.value.split("\n"), start = 0;
    for (var i = 0; i < n - 1 && i < lines.length; i++) start += lines[i].length + 1;
    ta.focus();
    ta.setSelectionRange(start, start + (lines[n - 1] || "").length);
    var lh = parseFloat(getComputedStyle(ta).lineHeight) || 20;
    ta.scrollTop = Math.max(0, (n - 4) * lh);
  });

  function start() {
    watchTheme();
    doc.querySelectorAll("form[data-confirm]").forEach(confirmState);
    providerFields();
    loadPlan();
    stream();
    doc.documentElement.dataset.ready = "1";
    if (window.performance && performance.mark) performance.mark("panel-ready");
  }
  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", start); else start();
})();
