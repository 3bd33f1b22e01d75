// The nahida console: live regions over server-sent events, and actions with confirmation.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]');
  const flash = document.getElementById("flash");
  const status = document.getElementById("live-status");

  function say(text, ok) {
    flash.textContent = text;
    flash.className = ok ? "ok" : "refused";
    flash.hidden = false;
  }

  // Live regions: the server sends {region, html} when a block of this page changed.
  const src = document.body.dataset.live;
  if (src && window.EventSource) {
    const stream = new EventSource(src);
    stream.onopen = function () { status.textContent = "live"; status.className = "live on"; };
    stream.onerror = function () { status.textContent = "reconnecting…"; status.className = "live off"; };
    stream.addEventListener("stale", function () { status.textContent = "ledger unreachable"; status.className = "live off"; });
    stream.addEventListener("region", function (event) {
      const update = JSON.parse(event.data);
      const target = document.querySelector('[data-region="' + update.region + '"]');
      if (!target) return;
      // Folded blocks a reader opened stay open (by position: new content is appended).
      const open = Array.from(target.querySelectorAll("details")).map(function (d) { return d.open; });
      target.innerHTML = update.html;
      target.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
      target.dataset.updated = String(Date.now());
    });
  }

  // Actions: confirm in a dialog, then POST JSON with the CSRF token; show the answer.
  const dialog = document.getElementById("confirm");
  function confirmThen(text, go) {
    if (!dialog || !dialog.showModal) { if (window.confirm(text)) go(); return; }
    document.getElementById("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.onclose = function () { if (dialog.returnValue === "ok") go(); };
    dialog.showModal();
  }
  document.querySelectorAll("form.action").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const body = {};
      new FormData(form).forEach(function (value, key) { body[key] = value; });
      confirmThen(form.dataset.confirm || "Are you sure?", function () {
        fetch(form.dataset.action, {
          method: "POST",
          credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf ? csrf.content : "" },
          body: JSON.stringify(body),
        }).then(function (response) {
          return response.json().then(function (data) {
            if (response.ok) { say(data.message || "done", true); form.reset(); }
            else { say((data.error && data.error.message) || ("refused: HTTP " + response.status), false); }
          });
        }).catch(function (error) { say("refused: the server did not answer (" + error + ")", false); });
      });
    });
  });
})();
