// The toolset picker without a round trip: "Select all shown" and "Clear shown" tick the boxes
// on the page, and the count of picked tools follows. Without scripts the same buttons ask the
// server, which answers the same page with the boxes ticked.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const picker = document.getElementById("picker");
  if (!picker) return;
  const count = document.getElementById("picked-count");
  const boxes = () => Array.from(picker.querySelectorAll('input[type="checkbox"][name="tool"]'));
  const hidden = picker.querySelectorAll('input[type="hidden"][name="tool"]').length;
  const recount = () => {
    if (count) count.textContent = `${boxes().filter((b) => b.checked).length + hidden} picked`;
  };
  picker.addEventListener("change", recount);
  picker.querySelectorAll("button[data-bulk]").forEach((button) => {
    button.addEventListener("click", (event) => {
      event.preventDefault();
      const checked = button.dataset.bulk === "select";
      boxes().forEach((box) => { box.checked = checked; });
      recount();
    });
  });
});
