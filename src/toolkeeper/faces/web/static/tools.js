// The tools page: "select every tool on this page" and a count of the selected tools. The
// page works without it: each tool's own checkbox is part of the bulk form.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const picks = () => Array.from(document.querySelectorAll('input[type="checkbox"][name="tool"]'));
  const counter = document.querySelector(".selected-count");
  const alls = Array.from(document.querySelectorAll("input.pick-all"));

  const refresh = () => {
    const boxes = picks();
    const chosen = boxes.filter((box) => box.checked).length;
    if (counter) counter.textContent = chosen ? `(${chosen} selected)` : "";
    for (const all of alls) {
      const mine = Array.from(all.closest("table").querySelectorAll('input[name="tool"]'));
      const on = mine.filter((box) => box.checked).length;
      all.checked = mine.length > 0 && on === mine.length;
      all.indeterminate = on > 0 && on < mine.length;
    }
  };

  for (const all of alls) {
    all.hidden = false;
    all.addEventListener("change", () => {
      for (const box of all.closest("table").querySelectorAll('input[name="tool"]')) box.checked = all.checked;
      refresh();
    });
  }
  for (const box of picks()) box.addEventListener("change", refresh);
  refresh();
});
