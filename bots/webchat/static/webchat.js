// The web chat's only script. The thread page works without it (reload to see answers);
// it follows the thread live (server-sent events: the bot's messages as they are sent and
// edited), and sends a file as the POST's raw body (past the console's limit on forms).
"use strict";

function messageItem(chat, m) {
  const li = document.createElement("li");
  li.id = "m" + m.id;
  li.className = m.kind + (m.deleted ? " deleted" : "");
  const role = document.createElement("span");
  role.className = "role";
  role.textContent = m.kind === "bot" ? chat.dataset.bot : m.sender;
  li.append(role);
  if (m.deleted) {
    const em = document.createElement("em");
    em.className = "muted";
    em.textContent = "(deleted)";
    li.append(em);
    return li;
  }
  if (m.text) {
    const pre = document.createElement("pre");
    pre.textContent = m.text;  // text, never markup: it is the model's and the users'
    li.append(pre);
  }
  if (m.file) {
    const p = document.createElement("p");
    p.className = "file";
    const a = document.createElement("a");
    a.href = "/chat/files/" + m.file.id;
    a.textContent = m.file.name;
    p.append(a, " (" + m.file.size + " bytes)");
    li.append(p);
  }
  if (m.approval && chat.dataset.click) {
    const form = document.createElement("form");
    form.method = "post";
    form.action = chat.dataset.url + "/approvals/" + m.id;
    form.className = "chat-decide";
    const csrf = document.createElement("input");
    csrf.type = "hidden"; csrf.name = "csrf"; csrf.value = chat.dataset.csrf;
    form.append(csrf);
    for (const [verb, label] of [["approve", "Approve"], ["deny", "Deny"]]) {
      const b = document.createElement("button");
      b.type = "submit"; b.name = "decision"; b.value = verb; b.className = verb;
      b.textContent = label;
      form.append(b);
    }
    li.append(form);
  }
  if (m.reaction) {
    const r = document.createElement("span");
    r.className = "reaction";
    r.textContent = m.reaction;
    li.append(r);
  }
  return li;
}

function followChat() {
  const chat = document.getElementById("chat");
  if (!chat || !chat.dataset.events || !window.EventSource) return;
  const source = new EventSource(chat.dataset.events);
  source.addEventListener("message", (event) => {
    const m = JSON.parse(event.data);
    const item = messageItem(chat, m);
    const old = document.getElementById(item.id);
    if (old) old.replaceWith(item); else chat.append(item);
  });
}

function sendFilesRaw() {
  const form = document.getElementById("chat-post");
  if (!form || !window.fetch) return;
  form.addEventListener("submit", async (event) => {
    const input = form.querySelector("input[type=file]");
    const file = input && input.files && input.files[0];
    if (!file) return;  // a message alone: the plain form POST
    event.preventDefault();
    if (file.size > Number(input.dataset.max)) {
      window.alert("The file is over the web chat's limit.");
      return;
    }
    const text = form.querySelector("textarea").value;
    const url = form.action + "/upload?text=" + encodeURIComponent(text);
    const r = await fetch(url, {
      method: "POST", body: file, credentials: "same-origin",
      headers: {"Content-Type": "application/octet-stream", "Accept": "application/json",
                "X-CSRF-Token": form.querySelector("input[name=csrf]").value,
                "X-Filename": encodeURIComponent(file.name),
                "X-Content-Type": file.type || "application/octet-stream"},
    });
    if (r.ok) { form.reset(); } else { window.alert(await r.text()); }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  followChat();
  sendFilesRaw();
});
