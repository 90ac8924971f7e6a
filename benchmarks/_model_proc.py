"""An OpenAI-compatible model server in its own process, for ``bench_blackbox.py``.

In production the model is a remote API: its CPU is not the bot's. This process answers
every ``POST /v1/chat/completions`` (JSON or SSE) at once (or after ``--latency`` s) with
``answer to: TAG``, TAG being the last ``q…`` tag in the last user message, so each side's
reply can be matched to the message that asked. It prints one JSON line
``{"ready": {"base_url": ...}, "pid": N}`` and runs until its stdin closes; nothing is
recorded per request (a long run must not grow this process).

    python benchmarks/_model_proc.py [--latency 2.0]
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


class EchoModel(FakeOpenAIServer):
    """Answers each request from its own body; keeps no per-request record."""

    def __init__(self, *, latency: float) -> None:
        super().__init__()
        self.latency = latency

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        tags = TAG.findall(_last_user_text(body))
        text = ANSWER + (tags[-1] if tags else "?")
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        reply = TextReply(text, Usage(input_tokens=40, output_tokens=6))
        if body.get("stream") is True:
            return await self._write_sse(request, self.render_sse(reply, body), drop=False)
        return web.json_response(self.render_json(reply, body))


async def _main(latency: float) -> None:
    async with EchoModel(latency=latency) as srv:
        print(json.dumps({"ready": {"base_url": srv.base_url}, "pid": os.getpid()}), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while await reader.readline():
            pass  # any line is ignored; end of file (the benchmark is gone) stops us


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    asyncio.run(_main(parser.parse_args().latency))
