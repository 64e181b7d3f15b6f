// mysqlq dashboard: refreshes the overview's numbers every few seconds from /api/overview,
// keeps the times' relative parts current (every 15 s, on the database's clock) with the
// browser's local time in their title, copies CLI commands, and handles the keyboard
// shortcuts (`?` lists them). Vendored, no build step. The pages work without it.
"use strict";
(function () {
  var INTERVAL_MS = 3000;
  var TIMES_MS = 15000;

  // --- the overview's counts --------------------------------------------------------------
  function refresh() {
    var api = document.body.getAttribute("data-api");
    var live = document.getElementById("live");
    fetch(api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (data) {
        var byQueue = {};
        data.queues.forEach(function (q) { byQueue[q.queue] = q; });
        document.querySelectorAll("[data-q][data-f]").forEach(function (el) {
          var q = byQueue[el.getAttribute("data-q")];
          if (!q) { return; }
          var f = el.getAttribute("data-f");
          var v = f === "paused" ? (q.paused ? "paused" : "running") : q[f];
          if (v !== undefined && v !== null) { el.textContent = String(v); }
        });
        if (live) { live.textContent = "live · " + new Date().toLocaleTimeString(); }
      })
      .catch(function (e) {
        if (live) { live.textContent = "refresh failed (" + e.message + ")"; }
      });
  }

  // --- times: the same words as the server's (dashboard/time.rs) ----------------------------
  // "2026-12-05T10:00:01.123456Z" -> a Date (to the millisecond).
  function parse(iso) {
    var m = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,3})\d*)?Z$/.exec(iso || "");
    if (!m) { return null; }
    var d = new Date(0);
    d.setUTCFullYear(+m[1], +m[2] - 1, +m[3]);
    d.setUTCHours(+m[4], +m[5], +m[6], m[7] ? +(m[7] + "00").slice(0, 3) : 0);
    return d;
  }
  function grouped(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function years(a, b) { // whole calendar years from a to b (a <= b)
    function key(d) {
      return [d.getUTCMonth(), d.getUTCDate(),
        d.getUTCHours() * 3600 + d.getUTCMinutes() * 60 + d.getUTCSeconds(), d.getUTCMilliseconds()];
    }
    var y = b.getUTCFullYear() - a.getUTCFullYear(), ka = key(a), kb = key(b);
    for (var i = 0; i < 4; i++) {
      if (kb[i] !== ka[i]) { return kb[i] < ka[i] ? y - 1 : y; }
    }
    return y;
  }
  function relative(t, now) {
    var past = t <= now, a = past ? t : now, b = past ? now : t;
    var secs = Math.floor((b - a) / 1000), span;
    if (secs < 1) { return "now"; }
    if (secs < 60) { span = secs + " s"; }
    else if (secs < 3600) { span = Math.floor(secs / 60) + " min"; }
    else if (secs < 48 * 3600) { span = Math.floor(secs / 3600) + " h"; }
    else {
      var y = years(a, b);
      span = y === 0 ? Math.floor(secs / 86400) + " days" : y === 1 ? "1 year" : grouped(y) + " years";
    }
    return past ? span + " ago" : "in " + span;
  }
  // The database's clock, from the page's first time: its data-now is when the page was read.
  var skew = null;
  function refreshTimes() {
    var times = document.querySelectorAll("time[datetime][data-now]");
    if (skew === null && times.length) {
      var read = parse(times[0].getAttribute("data-now"));
      skew = read ? read.getTime() - Date.now() : 0;
    }
    var now = new Date(Date.now() + (skew || 0));
    times.forEach(function (el) {
      var t = parse(el.getAttribute("datetime"));
      if (!t) { return; }
      var text = el.textContent, cut = text.indexOf(" · ");
      if (cut >= 0) { el.textContent = text.slice(0, cut) + " · " + relative(t, now); }
      if (!el.hasAttribute("data-utc")) {
        el.setAttribute("data-utc", el.getAttribute("title") || "");
        el.setAttribute("title", el.getAttribute("data-utc") + "\n" + t.toLocaleString(undefined, {
          year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
          second: "2-digit", timeZoneName: "short"
        }) + " (your time)");
      }
    });
  }

  // --- copy buttons of the CLI commands ----------------------------------------------------
  function copyButtons() {
    document.querySelectorAll("button[data-copy]").forEach(function (b) {
      var code = document.getElementById(b.getAttribute("data-copy"));
      if (!code) { return; }
      b.hidden = false;
      b.addEventListener("click", function () {
        function done(what) {
          b.textContent = what;
          setTimeout(function () { b.textContent = "Copy"; }, 2500);
        }
        function select() { // no clipboard outside secure contexts: select it for Ctrl+C
          var range = document.createRange();
          range.selectNodeContents(code);
          var sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(range);
          done("Selected: press Ctrl+C");
        }
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(code.textContent).then(function () { done("Copied"); }, select);
        } else {
          select();
        }
      });
    });
  }

  // --- keyboard shortcuts ------------------------------------------------------------------
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#jobs tbody tr[data-id]")); }
  function current() { return document.querySelector("#jobs tbody tr.kbd-current"); }
  function move(step) {
    var all = rows();
    if (!all.length) { return; }
    var at = all.indexOf(current());
    var next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
    if (at >= 0) { all[at].classList.remove("kbd-current"); }
    all[next].classList.add("kbd-current");
    all[next].scrollIntoView({ block: "nearest" });
  }
  function help() {
    var d = document.getElementById("kbd-help");
    if (!d) { return; }
    if (typeof d.showModal === "function") { d.showModal(); } else { d.setAttribute("open", ""); }
  }
  function typing(el) {
    return el && (el.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName));
  }
  function onKey(e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) { return; }
    var dialog = document.getElementById("kbd-help");
    if (dialog && dialog.open) { return; }
    var row = current();
    switch (e.key) {
      case "/":
        var q = document.getElementById("q");
        if (q) { e.preventDefault(); q.focus(); q.select(); }
        break;
      case "j": move(1); break;
      case "k": move(-1); break;
      case "x":
        var box = row && row.querySelector("input[type=checkbox]");
        if (box) { box.click(); }
        break;
      case "Enter":
        // Only when nothing else would take the Enter (a focused link or button does).
        var link = row && row.querySelector("a[href]");
        var taken = e.target && e.target.closest && e.target.closest("a[href], button, summary, [role=button], dialog");
        if (link && !taken) {
          e.preventDefault();
          window.location.href = link.href;
        }
        break;
      case "?": e.preventDefault(); help(); break;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[data-q][data-f]")) {
      refresh();
      setInterval(refresh, INTERVAL_MS);
    }
    refreshTimes();
    setInterval(refreshTimes, TIMES_MS);
    copyButtons();
    var open = document.getElementById("kbd-open");
    if (open) {
      open.hidden = false;
      open.addEventListener("click", help);
    }
    document.addEventListener("keydown", onKey);
  });
})();
