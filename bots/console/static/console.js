// The console's only script: the pages work without it; it adds confirmations.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form.decide")) {
    form.addEventListener("submit", (event) => {
      const button = event.submitter;
      const verb = button && button.value === "deny" ? "Deny" : "Approve";
      if (!window.confirm(verb + " this call?")) event.preventDefault();
    });
  }
});
