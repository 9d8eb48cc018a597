// The approvals inbox, live: the time left on each waiting call counts down, and the list is
// fetched again whenever the server says the set of waiting calls changed (server-sent events).
// Without this script the page shows each call's deadline and a Refresh link.
"use strict";

(() => {
  const STREAM = "/approvals/events";
  const FRAGMENT = "/approvals?fragment=1";

  function left(seconds) {
    if (seconds <= 0) return "time is up";
    const minutes = Math.floor(seconds / 60);
    const rest = String(seconds % 60).padStart(2, "0");
    return minutes ? `${minutes}:${rest} min left` : `${seconds} s left`;
  }

  function tick() {
    const now = Date.now();
    for (const deadline of document.querySelectorAll("[data-deadline]")) {
      const shown = deadline.parentElement.querySelector(".countdown");
      if (!shown) continue;
      const seconds = Math.max(0, Math.round((Date.parse(deadline.dataset.deadline) - now) / 1000));
      shown.textContent = `(${left(seconds)})`;
      shown.classList.toggle("urgent", seconds < 15);
    }
  }

  // The fetched list replaces the shown one, except the calls already shown: those stay as they
  // are, so a reason being typed or opened arguments are not lost.
  function replaceList(html) {
    const current = document.getElementById("approvals-list");
    const holder = document.createElement("template");
    holder.innerHTML = html.trim();
    const fresh = holder.content.getElementById("approvals-list");
    if (!current || !fresh) return;
    for (const card of fresh.querySelectorAll("article.approval")) {
      const shown = document.getElementById(card.id);
      if (shown) card.replaceWith(shown);
    }
    current.replaceWith(fresh);
    tick();
  }

  let fetching = Promise.resolve();
  function refetch() {
    fetching = fetching.then(async () => {
      const answer = await fetch(FRAGMENT, { credentials: "same-origin", headers: { accept: "text/html" } });
      if (answer.ok) replaceList(await answer.text());
    }).catch(() => {}); // the next event tries again
  }

  function listen() {
    const source = new EventSource(STREAM);
    const live = document.querySelector(".section-head .live");
    source.addEventListener("open", () => { if (live) live.hidden = false; });
    source.addEventListener("error", () => { if (live) live.hidden = true; });
    source.addEventListener("pending", (event) => {
      const list = document.getElementById("approvals-list");
      const waiting = JSON.parse(event.data).waiting.join(" ");
      if (!list || list.dataset.waiting !== waiting) refetch();
    });
    window.addEventListener("pagehide", () => source.close());
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!document.getElementById("approvals-list")) return;
    tick();
    setInterval(tick, 1000);
    if ("EventSource" in window) listen();
  });
})();
