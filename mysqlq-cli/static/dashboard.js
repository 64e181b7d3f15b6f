// mysqlq dashboard: refreshes the numbers of the page every few seconds from /api/overview.
// Vendored, no build step. The pages work without it.
"use strict";
(function () {
  var INTERVAL_MS = 3000;
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
  document.addEventListener("DOMContentLoaded", function () {
    if (document.querySelector("[data-q][data-f]")) {
      refresh();
      setInterval(refresh, INTERVAL_MS);
    }
  });
})();
