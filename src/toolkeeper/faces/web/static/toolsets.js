// The toolset picker without a round trip: "Select all shown" and "Clear shown" tick the boxes
// on the page, and the count of picked tools and their estimated tokens follow (each tool's
// figure is in its box's data-tokens, as the server counted it). Without scripts the same
// buttons ask the server, which answers the same page with the boxes ticked and the total.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const picker = document.getElementById("picker");
  if (!picker) return;
  const count = document.getElementById("picked-count");
  const tokens = document.getElementById("picked-tokens");
  const boxes = () => Array.from(picker.querySelectorAll('input[type="checkbox"][name="tool"]'));
  const hidden = Array.from(picker.querySelectorAll('input[type="hidden"][name="tool"]'));
  const cost = (input) => Number(input.dataset.tokens) || 0;
  const recount = () => {
    const picked = [...boxes().filter((b) => b.checked), ...hidden];
    if (count) count.textContent = `${picked.length} picked`;
    if (tokens) tokens.textContent = picked.reduce((sum, input) => sum + cost(input), 0).toLocaleString("en-US");
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
