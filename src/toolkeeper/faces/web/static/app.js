// The dashboard's few scripts. Every page works without them; they add live updates and
// spare a click here and there.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // The theme applies as soon as it is chosen.
  const theme = document.getElementById("theme-choice");
  if (theme) {
    theme.addEventListener("change", () => theme.form.submit());
    const button = theme.form.querySelector("button");
    if (button) button.hidden = true;
  }
});
