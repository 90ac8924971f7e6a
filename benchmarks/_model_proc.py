"""An OpenAI-compatible model server in its own process, for ``bench_blackbox.py``.

In production the model is a remote API: its CPU is not the bot's. This process answers
every ``POST /v1/chat/completions`` (JSON or SSE) at once (or after ``--latency`` s) with
``answer to: TAG``, TAG being the last ``q…`` tag in the last user message, so each side's
reply can be matched to the message that asked. It prints one JSON line
``{"ready": {"base_url": ...}, "pid": N}`` and runs until its stdin closes; nothing is
recorded per request (a long run must not grow this process).

    python benchmarks/_model_proc.py [--latency 2.0] [--stream-tokens 400 --tokens-per-s 40]

``--stream-tokens N``: the answer goes on with N tokens (`` w0 w1 …``) and ends with `` END``;
a streamed request (SSE) gets its first words at once, then one token every
``1 / --tokens-per-s`` s; a JSON request gets the whole answer after that same time (a model
writing N tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from geode.messages import Usage
from geode.testing._sse import TextReply
from geode.testing.fake_openai import FakeOpenAIServer

ANSWER = "answer to: "
TAG = re.compile(r"\bq\d+-\d+-\d+\b")


def _last_user_text(body: Any) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    return ""


def _content_of(data: str) -> str:
    """The text delta of one SSE chunk ("" for any other chunk)."""
    if not data.startswith("{"):
        return ""
    choices = json.loads(data).get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


class EchoModel(FakeOpenAIServer):
    """Answers each request from its own body; keeps no per-request record."""

    def __init__(self, *, latency: float, stream_tokens: int = 0,
                 tokens_per_s: float = 40.0) -> None:
        super().__init__()
        self.latency = latency
        self.stream_tokens = stream_tokens
        self.tokens_per_s = tokens_per_s

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        tags = TAG.findall(_last_user_text(body))
        text = ANSWER + (tags[-1] if tags else "?")
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if self.stream_tokens:
            return await self._tokens(request, body, text)
        reply = TextReply(text, Usage(input_tokens=40, output_tokens=6))
        if body.get("stream") is True:
            return await self._write_sse(request, self.render_sse(reply, body), drop=False)
        return web.json_response(self.render_json(reply, body))


    async def _tokens(self, request: web.Request, body: Any, head: str) -> web.StreamResponse:
        """``head``, then the tokens at the model's pace (see the module docstring)."""
        tokens = [f" w{i}" for i in range(self.stream_tokens)] + [" END"]
        every = 1.0 / self.tokens_per_s
        usage = Usage(input_tokens=40, output_tokens=len(tokens) + 4)
        if body.get("stream") is not True:
            await asyncio.sleep(every * len(tokens))
            return web.json_response(self.render_json(TextReply(head + "".join(tokens), usage),
                                                      body))
        frame = self.render_sse(TextReply(head, usage), body)
        # [role, content=head, finish, (usage), DONE]: the tokens go after the head
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        content = max(i for i, e in enumerate(frame) if _content_of(e.data))
        for event in frame[:content + 1]:
            await response.write(event.encode())
        template = json.loads(frame[content].data)
        for token in tokens:
            await asyncio.sleep(every)
            template["choices"][0]["delta"] = {"content": token}
            await response.write(f"data: {json.dumps(template)}\n\n".encode())
        for event in frame[content + 1:]:
            await response.write(event.encode())
        await response.write_eof()
        return response


async def _main(latency: float, stream_tokens: int, tokens_per_s: float) -> None:
    async with EchoModel(latency=latency, stream_tokens=stream_tokens,
                         tokens_per_s=tokens_per_s) as srv:
        print(json.dumps({"ready": {"base_url": srv.base_url}, "pid": os.getpid()}), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while await reader.readline():
            pass  # any line is ignored; end of file (the benchmark is gone) stops us


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--stream-tokens", type=int, default=0)
    parser.add_argument("--tokens-per-s", type=float, default=40.0)
    args = parser.parse_args()
    asyncio.run(_main(args.latency, args.stream_tokens, args.tokens_per_s))
