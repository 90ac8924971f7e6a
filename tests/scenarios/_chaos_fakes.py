"""The Telegram fake and a file-editing model, in a process of their own (the chaos scenario
and the replicas benchmark restart the database and kill replicas; the platform and the
model must go on as remote services do).

    python tests/scenarios/_chaos_fakes.py '{"token": "123456:TEST-TOKEN", "latency": 1.0}'

It prints one JSON line ``{"telegram": {...}, "model": {"base_url": ...}, "pid": N}`` and then
answers JSON-line requests on stdin, one reply line each:

* ``{"op": "say", "chat": C, "text": T, "user": U}`` -> ``{"message_id": N}``: a user's message;
* ``{"op": "bot_messages", "chat": C}`` -> ``{"messages": [{"message_id", "text",
  "reply_to"}]}``: the bot's messages as the chat shows them now (after edits);
* ``{"op": "sent"}`` -> ``{"sent": [{"method", "message_id", "text", "reply_to"}]}``: every
  sendMessage / editMessageText that took effect;
* ``{"op": "answered", "chat": C, "tags": [...]}`` -> ``{"answered": [...]}``: the tags whose
  answer ("answer to: TAG") the chat shows now;
* ``{"op": "load_start", "chat": C, "user": U, "clients": K, "first_tag": N}``: a closed
  loop in the background (K users, each sends a mention and waits for its answer, then the
  next; tags ``qN``, ``qN+1``, ...); ``{"op": "load_pending"}`` -> ``{"pending": [tags]}`` (sent,
  not answered yet); ``{"op": "load_stop"}`` -> ``{"replies", "elapsed_s", "latencies",
  "unanswered"}``;
* ``{"op": "quit"}``.

The model (OpenAI-compatible): a request whose last message is the user's (tag ``qN``)
gets one ``edit_file`` call that appends the line ``TAG`` to ``log.txt`` (before ``END``);
the request after its result gets ``answer to: TAG``. A line applied twice shows in the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog
from aiohttp import web

from bots.testing.telegram import FakeTelegramServer
from geode.messages import Usage
from geode.testing._sse import TextReply, ToolCallsReply
from geode.testing.fake_openai import FakeOpenAIServer

TAG = re.compile(r"\bq\d+\b")


def _tag_of(body: Any) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content or [] if isinstance(p, dict))
        tags = TAG.findall(text)
        if tags:
            return str(tags[-1])
    return "?"


class EditingModel(FakeOpenAIServer):
    """Each turn: an edit_file call appending its tag, then the answer."""

    def __init__(self, *, latency: float) -> None:
        super().__init__()
        self.latency = latency
        self.calls = 0

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.calls += 1
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        tag = _tag_of(body)
        last = (body.get("messages") or [{}])[-1]
        reply: TextReply | ToolCallsReply
        if last.get("role") == "user":
            reply = ToolCallsReply(
                calls=(("edit_file", {"path": "log.txt", "old_string": "END",
                                      "new_string": f"{tag}\nEND"},
                        self.next_id("call_")),),
                text="", usage=Usage(input_tokens=40, output_tokens=12))
        else:
            reply = TextReply(f"answer to: {tag}", Usage(input_tokens=60, output_tokens=6))
        if body.get("stream") is True:
            return await self._write_sse(request, self.render_sse(reply, body), drop=False)
        return web.json_response(self.render_json(reply, body))


class ClosedLoad:
    """``clients`` users in one chat, each sending a mention (a new thread), waiting until its
    answer shows, and sending the next, until stopped (``bench_replicas.py``)."""

    def __init__(self, tg: FakeTelegramServer, *, chat: int, user: int, clients: int,
                 first_tag: int) -> None:
        self.tg = tg
        self.chat = chat
        self.user = user
        self.next_tag = first_tag
        self.sent: dict[str, float] = {}
        self.latencies: list[float] = []
        self.started = time.monotonic()
        self.tasks = [asyncio.create_task(self._client()) for _ in range(clients)]

    def _shown(self) -> set[str]:
        return {m.plain_text for m in self.tg.messages_in(self.chat, from_bot=True)}

    async def _client(self) -> None:
        while True:
            tag = f"q{self.next_tag}"
            self.next_tag += 1
            self.sent[tag] = time.monotonic()
            self.tg.user_says(self.chat, f"@geode_bot {tag}", from_user=self.user)
            while f"answer to: {tag}" not in self._shown():
                await asyncio.sleep(0.02)
            self.latencies.append(time.monotonic() - self.sent.pop(tag))

    def pending(self) -> list[str]:
        return list(self.sent)

    async def stop(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return {"replies": len(self.latencies), "elapsed_s": elapsed,
                "latencies": self.latencies, "unanswered": len(self.sent)}


_load: ClosedLoad | None = None


async def _handle(tg: FakeTelegramServer, req: dict[str, Any]) -> dict[str, Any]:
    global _load
    op = req.get("op")
    if op == "load_start":
        _load = ClosedLoad(tg, chat=int(req["chat"]), user=int(req["user"]),
                           clients=int(req["clients"]), first_tag=int(req["first_tag"]))
        return {"ok": True}
    if op == "load_pending":
        assert _load is not None
        return {"pending": _load.pending()}
    if op == "load_stop":
        assert _load is not None
        load, _load = _load, None
        return await load.stop()
    if op == "say":
        update = tg.user_says(int(req["chat"]), str(req["text"]), from_user=int(req["user"]))
        return {"message_id": tg.message_id_for(update)}
    if op == "bot_messages":
        return {"messages": [{"message_id": m.message_id, "text": m.plain_text,
                              "reply_to": m.reply_to_message_id}
                             for m in tg.messages_in(int(req["chat"]), from_bot=True)]}
    if op == "sent":
        return {"sent": [{"method": s.method, "message_id": s.message_id, "text": s.plain_text,
                          "reply_to": s.reply_to_message_id} for s in tg.sent]}
    if op == "answered":
        shown = {m.plain_text for m in tg.messages_in(int(req["chat"]), from_bot=True)}
        return {"answered": [t for t in req["tags"] if f"answer to: {t}" in shown]}
    raise ValueError(f"unknown op {op!r}")


async def _main(config: dict[str, Any]) -> None:
    # stdout is the reply channel: the fakes' own log lines go to stderr
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    async with FakeTelegramServer(token=config["token"], bot_username="geode_bot") as tg, \
            EditingModel(latency=float(config.get("latency", 0.0))) as model:
        print(json.dumps({"telegram": {"base_url": tg.base_url,
                                       "base_file_url": tg.base_file_url},
                          "model": {"base_url": model.base_url}, "pid": os.getpid()}),
              flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            req = json.loads(line)
            if req.get("op") == "quit":
                print(json.dumps({"ok": True}), flush=True)
                return
            try:
                reply = await _handle(tg, req)
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
