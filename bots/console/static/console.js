// The console's only script. Every page works without it; it adds confirmations before a
// decision, and follows a thread live (server-sent events) on its page.
"use strict";

function confirmDecisions() {
  for (const form of document.querySelectorAll("form.decide")) {
    form.addEventListener("submit", (event) => {
      const button = event.submitter;
      const verb = button && button.value === "deny" ? "Deny" : "Approve";
      if (!window.confirm(verb + " this call?")) event.preventDefault();
    });
  }
}

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;  // text, never markup: the payload is the model's and the users'
  return td;
}

function followThread() {
  const table = document.getElementById("timeline");
  if (!table || !table.dataset.events || !window.EventSource) return;
  const source = new EventSource(table.dataset.events);
  source.addEventListener("timeline", (event) => {
    const row = JSON.parse(event.data);
    const tr = document.createElement("tr");
    tr.append(cell(row.created_at), cell(row.turn_id), cell(row.kind),
              cell(JSON.stringify(row.payload)));
    (table.tBodies[0] || table).append(tr);
  });
  source.addEventListener("messages", () => {
    document.getElementById("live-note").hidden = false;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  confirmDecisions();
  followThread();
});
