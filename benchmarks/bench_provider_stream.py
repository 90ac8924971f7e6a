"""CPU per streamed answer of a provider adapter, read through the vendor SDK or lean.

An Anthropic-shaped model server runs in its own process (its CPU is not the bot's, as with
a remote API) and streams every answer as the Messages API does: ``message_start``, a
``ping``, one text block of ``--tokens`` ``content_block_delta`` events at
``--tokens-per-s`` (0: as fast as it can write), ``message_delta`` with the usage, and
``message_stop``. This process runs the adapter's ``stream()`` ``--replies`` times per side,
``--concurrency`` at once, and reports the CPU it spent (``time.process_time``) per answer:

* ``sdk``: :class:`~geode.providers.anthropic.AnthropicProvider` with its own SDK client
  (the SDK's ``messages.stream``: a pydantic event model per server-sent event, and its
  accumulated snapshot of the message);
* ``lean``: the adapter as the runtime builds it (a :class:`ClientCache`: one POST on the
  shared aiohttp session, one ``json.loads`` per event).

The sides alternate over ``--rounds``; medians are printed. ::

    python benchmarks/bench_provider_stream.py [--tokens 400 --tokens-per-s 40 \\
        --replies 20 --concurrency 10 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from geode.messages import Message, Usage
from geode.testing._sse import SSEEvent, TextReply
from geode.testing.fake_anthropic import FakeAnthropicServer


class PacedAnthropic(FakeAnthropicServer):
    """Streams ``tokens`` text deltas at ``tokens_per_s`` for every request."""

    def __init__(self, *, tokens: int, tokens_per_s: float) -> None:
        super().__init__()
        self.tokens = tokens
        self.tokens_per_s = tokens_per_s

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        words = [f"w{i} " for i in range(self.tokens)]
        frame = self.render_sse(TextReply("", Usage(input_tokens=40,
                                                    output_tokens=self.tokens)), body)
        # [message_start, ping, block_start, delta(""), block_stop, message_delta, stop]
        head, tail = frame[:3], frame[4:]
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in head:
            await response.write(event.encode())
        every = 1.0 / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
        for word in words:
            if every:
                await asyncio.sleep(every)
            delta = {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": word}}
            await response.write(SSEEvent(json.dumps(delta), "content_block_delta").encode())
        for event in tail:
            await response.write(event.encode())
        await response.write_eof()
        return response


async def _serve(tokens: int, tokens_per_s: float) -> None:
    async with PacedAnthropic(tokens=tokens, tokens_per_s=tokens_per_s) as srv:
        print(json.dumps({"base_url": srv.base_url}), flush=True)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while await reader.readline():
            pass  # end of file: the benchmark is gone


async def _replies(provider: Any, n: int, concurrency: int, tokens: int) -> float:
    """CPU seconds per answer of ``n`` streamed answers, ``concurrency`` at once."""
    from geode.providers.base import ModelRequest

    request = ModelRequest(model="fake-model", system="You are terse.",
                           messages=(Message.user("hi"),), max_tokens=1024)
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            deltas = 0
            async for event in provider.stream(request):
                if event.kind == "text_delta":
                    deltas += 1
                elif event.kind == "done":
                    assert event.response is not None
                    assert event.response.usage.output_tokens == tokens
            assert deltas == tokens, deltas

    before = time.process_time()
    await asyncio.gather(*(one() for _ in range(n)))
    return (time.process_time() - before) / n


async def _side(side: str, base_url: str, args: argparse.Namespace) -> float:
    from geode.providers._clients import ClientCache
    from geode.providers.anthropic import AnthropicProvider

    cache = ClientCache()
    if side == "lean":
        provider = AnthropicProvider(
            api_key="bench", base_url=base_url,
            client=cache.anthropic(api_key="bench", base_url=base_url, timeout=60.0),
            http=cache)
    else:
        provider = AnthropicProvider(api_key="bench", base_url=base_url)
    try:
        await _replies(provider, 2, 2, args.tokens)  # warm: connections, imports, caches
        return await _replies(provider, args.replies, args.concurrency, args.tokens)
    finally:
        await provider.aclose()
        await cache.aclose()


async def _main(args: argparse.Namespace, base_url: str) -> None:
    results: dict[str, list[float]] = {"sdk": [], "lean": []}
    for r in range(args.rounds):
        order = ["sdk", "lean"] if r % 2 == 0 else ["lean", "sdk"]
        for side in order:
            ms = 1000 * await _side(side, base_url, args)
            results[side].append(ms)
            print(f"round {r + 1} {side}: {ms:.1f} ms CPU per answer", flush=True)
    sdk, lean = (statistics.median(results[s]) for s in ("sdk", "lean"))
    print(f"\n{args.tokens} tokens at {args.tokens_per_s:g}/s, {args.replies} answers per "
          f"side and round, {args.concurrency} at once, {args.rounds} rounds "
          f"(load average {os.getloadavg()[0]:.1f}):")
    for side, value in (("sdk", sdk), ("lean", lean)):
        print(f"  {side:4}: {value:7.1f} ms CPU per answer (median; "
              f"{', '.join(f'{v:.1f}' for v in results[side])})")
    print(f"  ratio sdk / lean: {sdk / lean:.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=400)
    p.add_argument("--tokens-per-s", type=float, default=40.0)
    p.add_argument("--replies", type=int, default=20)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        asyncio.run(_serve(args.tokens, args.tokens_per_s))
        return
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--tokens", str(args.tokens),
         "--tokens-per-s", str(args.tokens_per_s)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        asyncio.run(_main(args, json.loads(server.stdout.readline())["base_url"]))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
