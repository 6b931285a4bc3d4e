// caravel_lite dashboard: live refresh of pages that ask for it (data-refresh on
// <main>). Fetches the same URL's main part every few seconds and swaps it in, so the
// figures stay current without a full reload. Everything is readable without it.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || !main.dataset.refresh) { return; }
  var seconds = Math.max(parseInt(main.dataset.refresh, 10) || 5, 1);
  var busy = false;

  function mark(text) {
    var live = main.querySelector(".live");
    if (live) { live.hidden = false; live.textContent = text; }
  }

  function refresh() {
    if (busy || document.hidden) { return; }
    // Leave the page alone while the reader has the figures table open.
    var open = main.querySelector("details[open]");
    if (open) { return; }
    busy = true;
    fetch(window.location.href, {headers: {"X-Caravel-Partial": "1"},
                                 credentials: "same-origin", cache: "no-store"})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.text();
      })
      .then(function (html) {
        main.innerHTML = html;  // server-rendered and escaped, like the first load
        main.dataset.refreshed = String(Date.now());
        mark("· live");
      })
      .catch(function () { mark("· refresh failed, retrying"); })
      .then(function () { busy = false; });
  }

  mark("· live");
  window.setInterval(refresh, seconds * 1000);
}());
