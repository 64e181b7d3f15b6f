// mysqlq dashboard: live pages. Polls the page's own URL (X-Mysqlq-Live: 1, If-None-Match)
// every 750 ms while the tab is visible and not paused, and swaps the page's [data-live]
// regions whose HTML changed, keeping ticked checkboxes and never touching a region that holds
// the focus. Backs off after an error (1, 2, 4 ... 30 s) and says so. Vendored, no build step;
// the pages work without it (then ?refresh=N reloads them every N seconds).
"use strict";
(function () {
  var INTERVAL_MS = 750;
  var etag = null;
  var paused = false;
  var timer = null;
  var failures = 0;

  function status(text) {
    var s = document.getElementById("live-status");
    if (s) { s.textContent = text; }
  }

  // The server renders every value escaped (maud), and the CSP runs no inline script.
  function swap(doc) {
    var changed = 0;
    doc.querySelectorAll("[data-live][id]").forEach(function (fresh) {
      var cur = document.getElementById(fresh.id);
      if (!cur || cur.innerHTML === fresh.innerHTML) { return; }
      if (cur.matches(":hover")) { return; } // the pointer is on it, maybe to click: next time
      var active = document.activeElement;
      if (active && active !== document.body && cur.contains(active) &&
          active.matches("input:not([type=checkbox]), textarea, select")) {
        return; // the operator is typing here: next time
      }
      var ticked = {};
      cur.querySelectorAll("input[type=checkbox]").forEach(function (c) {
        ticked[c.name + "=" + c.value] = c.checked;
      });
      var focusId = active && cur.contains(active) ? active.id : null;
      cur.innerHTML = fresh.innerHTML;
      cur.querySelectorAll("input[type=checkbox]").forEach(function (c) {
        var k = c.name + "=" + c.value;
        if (Object.prototype.hasOwnProperty.call(ticked, k)) { c.checked = ticked[k]; }
      });
      if (focusId) {
        var again = document.getElementById(focusId);
        if (again) { again.focus(); }
      }
      changed += 1;
    });
    return changed;
  }

  function schedule(ms) {
    if (timer === null) { timer = setTimeout(poll, ms); }
  }

  function poll() {
    timer = null;
    if (paused || document.visibilityState !== "visible") { return; }
    var headers = { "X-Mysqlq-Live": "1" };
    if (etag) { headers["If-None-Match"] = etag; }
    fetch(location.href, { credentials: "same-origin", headers: headers, cache: "no-store" })
      .then(function (r) {
        if (r.status === 304) { return null; }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        etag = r.headers.get("ETag");
        return r.text();
      })
      .then(function (html) {
        failures = 0;
        var n = html === null ? 0 : swap(new DOMParser().parseFromString(html, "text/html"));
        status("live · updated " + new Date().toLocaleTimeString() + (n ? " · " + n + " changed" : ""));
        schedule(INTERVAL_MS);
      })
      .catch(function (e) {
        failures += 1;
        var wait = Math.min(30000, 1000 * Math.pow(2, failures - 1));
        status("live paused: " + e.message + ", retrying in " + Math.round(wait / 1000) + " s");
        schedule(wait);
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { schedule(0); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    if (!document.querySelector("[data-live][id]")) { return; }
    var button = document.getElementById("live-pause");
    if (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        paused = !paused;
        button.setAttribute("aria-pressed", String(paused));
        button.textContent = paused ? "Resume live" : "Pause live";
        if (paused) { status("live paused"); } else { schedule(0); }
      });
    }
    status("live");
    schedule(INTERVAL_MS);
  });
})();
