"""A chat platform's wire-level fake in its own process, driven by ``bench_channels.py``.

In production the platform is a remote server: its CPU is not the bot's. Run in the bot's
process, the fake's aiohttp server and JSON would be billed to the bot, and more so to the
side that makes more platform calls per reply (GEODE ~4, the floor bots 1). So the benchmark
starts this module as a child process::

    python benchmarks/_fake_proc.py telegram '{"token": "123:ABC", "bot_username": "geode_bot"}'

It starts the fake on 127.0.0.1 (port 0), writes one JSON line ``{"ready": {...}, "pid": N}``
(``ready``: what a bot needs to reach the fake, e.g. ``base_url``) and then answers JSON-line
requests on stdin, one reply line each, strictly in turn:

* ``{"op": "round", "tags": [...], "chat": X, "user": Y, "within": 60, "partial": false}``:
  push one mention per tag into chat X from user Y, all at once (each starts a new thread),
  and wait until every tag's answer is visible. Reply: ``{"latencies": [s | null, ...],
  "fake_cpu_s": F}``: per tag (in order), seconds from the push to the answer, and this
  process's CPU time over the round. Both clocks are read here, so nothing is compared
  across processes. With ``partial`` a timeout returns what was answered (``null`` for the
  rest) instead of an error.
* ``{"op": "closed", "chats": [...], "user": Y, "per_chat": M, "prefix": P, "within": 60}``
  (``bench_blackbox.py``): every chat at once sends a mention, waits for its answer, sends
  the next, M times (tags ``P-<chat index>-<k>``). A message not answered within ``within``
  s is lost and ends its chat's loop. Reply: ``{"latencies": [...], "lost": L,
  "elapsed_s": T, "fake_cpu_s": F}``.
* ``{"op": "open", "chats": [...], "user": Y, "interval": 8, "duration": D, "prefix": P,
  "within": 30}``: each chat sends a mention every ``interval`` s (starts spread over one
  interval) for ``duration`` s, not waiting for answers; then waits up to ``within`` s for
  the last ones. Same reply.
* ``{"op": "api_calls"}``: ``{"calls": N}``, the platform API calls the bot made so far
  (Telegram: every method but ``getUpdates``; Slack: every Web API method but
  ``apps.connections.open``; Discord: every REST request).
* ``{"op": "set", "events_url": URL}``: where the Slack fake POSTs events (HTTP mode).
* ``{"op": "wait_connected", "within": 10}``: wait for the bot's push connection (Slack's
  Socket Mode, Discord's gateway session; Telegram polls: at once).
* ``{"op": "quit"}``: stop the fake and exit.

A failed request answers ``{"error": "..."}``. End of stdin (the benchmark exited or was
killed) stops the process, also in the middle of a round.

An answer is visible when the fake has applied a message whose text starts with the answer
prefix (Telegram ``sendMessage`` / ``editMessageText``, Slack ``chat.postMessage`` /
``chat.update``, Discord create / edit); the time is taken when the fake's change
notification runs the check, at most one event-loop pass after the request took effect.

The same :class:`FakeControl` also runs inside the benchmark's process
(``bench_channels.py --in-process``), to show what the old, in-process setup distorted.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Serve the checkout this file lives in, not whatever copy is installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ANSWER = "answer to: "

Written = list[tuple[list[Any], Callable[[Any], str | None]]]


@dataclass(frozen=True, kw_only=True)
class FakeDriver:
    """How to run and script one platform's fake."""

    #: an unstarted fake (an async context manager) from the config the benchmark passed
    make: Callable[[dict[str, Any]], Any]
    #: what a bot needs to reach the started fake
    info: Callable[[Any], dict[str, Any]]
    #: push one mention per tag into ``chat`` from ``user``, all at once
    push: Callable[[Any, list[str], Any, Any], Awaitable[None]]
    #: append-only lists of what the bot wrote, each with a getter for the text
    written: Callable[[Any], Written]
    #: wait until a predicate holds (the fake's own change notification); TimeoutError if not
    wait: Callable[[Any, Callable[[], bool], float], Awaitable[None]]
    #: platform API calls the bot made so far, polling excluded (None: not counted)
    api_calls: Callable[[Any], int] | None = None
    #: the bot holds its push connection (Socket Mode, gateway session); polling: always
    connected: Callable[[Any], bool] = lambda fake: True
    #: the platform's 429 answers so far (None: the fake does not count them)
    throttled: Callable[[Any], int] | None = None


# Telegram ----------------------------------------------------------------------------------------


def _tg_make(config: dict[str, Any]) -> Any:
    from bots.testing.telegram import FakeTelegramServer

    return FakeTelegramServer(token=config["token"], bot_username=config["bot_username"],
                              flood_per_s=float(config.get("flood_per_s", 0)))


async def _tg_push(fake: Any, tags: list[str], chat: Any, user: Any) -> None:
    for t in tags:
        fake.user_says(chat, f"@{fake.bot_username} {t}", from_user=user)


TELEGRAM = FakeDriver(
    make=_tg_make,
    info=lambda fake: {"base_url": fake.base_url, "base_file_url": fake.base_file_url},
    push=_tg_push,
    written=lambda fake: [(fake.sent, lambda s: s.plain_text)],
    wait=lambda fake, pred, within: fake.wait_until(pred, within=within),
    api_calls=lambda fake: sum(1 for c in fake.calls if c.method != "getUpdates"),
    throttled=lambda fake: sum(1 for c in fake.calls if c.status == 429),
)

# Slack -------------------------------------------------------------------------------------------


def _slack_make(config: dict[str, Any]) -> Any:
    from bots.testing.slack import FakeSlack

    return FakeSlack()


async def _slack_push(fake: Any, tags: list[str], chat: Any, user: Any) -> None:
    await asyncio.gather(*(fake.user_posts(chat, f"<@{fake.bot_user_id}> {t}", user=user)
                           for t in tags))


SLACK = FakeDriver(
    make=_slack_make,
    info=lambda fake: {"base_url": fake.base_url, "bot_token": fake.bot_token,
                       "app_token": fake.app_token, "signing_secret": fake.signing_secret,
                       "bot_user_id": fake.bot_user_id},
    push=_slack_push,
    written=lambda fake: [(fake.posts, lambda p: None if p.method == "chat.delete" else p.text)],
    wait=lambda fake, pred, within: fake.wait_until(pred, within=within),
    api_calls=lambda fake: sum(1 for c in fake.calls if c.method != "apps.connections.open"),
    connected=lambda fake: fake.connected > 0,
)

# Discord -----------------------------------------------------------------------------------------


def _dc_make(config: dict[str, Any]) -> Any:
    from bots.testing.discord import FakeDiscord

    fake = FakeDiscord(token=config["token"], heartbeat_interval_ms=5000)
    for i in range(int(config.get("channels", 1)) - 1):  # more text channels of its guild
        fake.add_text_channel(fake.guild_id, f"chat-{i + 1}")
    return fake


async def _dc_push(fake: Any, tags: list[str], chat: Any, user: Any) -> None:
    await asyncio.gather(*(fake.user_says(int(chat), t, author_id=int(user), mention_bot=True)
                           for t in tags))


DISCORD = FakeDriver(
    make=_dc_make,
    info=lambda fake: {"api_base": fake.api_base, "gateway_url": fake.gateway_url,
                       "channel_id": fake.channel_id, "user_id": fake.user_id,
                       "channel_ids": [cid for cid, c in fake.channels.items()
                                       if c["type"] == 0]},
    push=_dc_push,
    written=lambda fake: [(fake.sent, lambda s: s.content), (fake.edits, lambda e: e[2])],
    wait=lambda fake, pred, within: fake.wait_for(pred, timeout=within),
    api_calls=lambda fake: len(fake.requests),
    connected=lambda fake: fake.active_sessions > 0,
)

DRIVERS = {"telegram": TELEGRAM, "slack": SLACK, "discord": DISCORD}

# -- the control surface --------------------------------------------------------------------------


class _Answers:
    """Answers visible in the fake, indexed incrementally (scanning everything per check
    would make the measuring itself O(n^2) and inflate both sides)."""

    def __init__(self, sources: Written) -> None:
        self.sources = sources
        self.seen: dict[str, float] = {}
        #: when the answer's first words were visible (a streamed draft, or the answer)
        self.first: dict[str, float] = {}
        self._read = [0] * len(sources)

    def scan(self) -> None:
        now = time.perf_counter()
        for i, (items, text_of) in enumerate(self.sources):
            for item in items[self._read[i]:]:
                text = text_of(item)
                at = text.find(ANSWER) if text else -1
                if at < 0:
                    continue
                words = text[at + len(ANSWER):].split()
                if not words:
                    continue
                self.first.setdefault(words[0], now)
                # complete: the whole answer (a streamed one ends with END), not a draft
                if at == 0 and (len(words) == 1 or words[-1] == "END"):
                    self.seen.setdefault(words[0], now)
            self._read[i] = len(items)


class FakeControl:
    """Answers the requests listed in the module docstring for one started fake."""

    def __init__(self, driver: FakeDriver, fake: Any) -> None:
        self.driver = driver
        self.fake = fake
        self._answers = _Answers(driver.written(fake))
        #: seconds from a push to its answer's first visible words, by tag
        self.first_latency: dict[str, float] = {}

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        """One request's reply; a failure is an ``error`` reply, never an exception."""
        try:
            match req.get("op"):
                case "round":
                    return await self._round(req["tags"], req["chat"], req["user"],
                                             float(req.get("within", 60)),
                                             bool(req.get("partial", False)))
                case "closed":
                    return await self._closed(req["chats"], req["user"], int(req["per_chat"]),
                                              str(req["prefix"]), float(req.get("within", 60)))
                case "open":
                    return await self._open(req["chats"], req["user"], float(req["interval"]),
                                            float(req["duration"]), str(req["prefix"]),
                                            float(req.get("within", 30)))
                case "api_calls":
                    count = self.driver.api_calls
                    throttled = self.driver.throttled
                    return {"calls": count(self.fake) if count is not None else None,
                            "throttled": throttled(self.fake) if throttled is not None
                            else None}
                case "set":
                    self.fake.events_url = req["events_url"]
                case "wait_connected":
                    await self.driver.wait(self.fake, lambda: self.driver.connected(self.fake),
                                           float(req.get("within", 10)))
                case "quit":
                    pass
                case op:
                    raise ValueError(f"unknown op {op!r}")
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"ok": True}

    async def _round(self, tags: list[str], chat: Any, user: Any, within: float,
                     partial: bool) -> dict[str, Any]:
        seen = self._answers.seen

        def all_done() -> bool:
            self._answers.scan()
            return all(t in seen for t in tags)

        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await self.driver.push(self.fake, tags, chat, user)
        try:
            await self.driver.wait(self.fake, all_done, within)
        except TimeoutError:
            if not partial:
                missing = sum(t not in seen for t in tags)
                raise TimeoutError(f"{missing} of {len(tags)} not answered in {within} s"
                                   ) from None
        return {"latencies": [seen[t] - t0 if t in seen else None for t in tags],
                "fake_cpu_s": time.process_time() - cpu0}


    def _answered(self, tag: str) -> bool:
        self._answers.scan()
        return tag in self._answers.seen

    async def _ask(self, tag: str, chat: Any, user: Any, within: float) -> float | None:
        """Push one mention; its latency once answered, None if not within ``within`` s."""
        t0 = time.perf_counter()
        await self.driver.push(self.fake, [tag], chat, user)
        try:
            await self.driver.wait(self.fake, lambda: self._answered(tag), within)
        except TimeoutError:
            return None
        self.first_latency[tag] = self._answers.first.get(tag, self._answers.seen[tag]) - t0
        return self._answers.seen[tag] - t0

    async def _closed(self, chats: list[Any], user: Any, per_chat: int, prefix: str,
                      within: float) -> dict[str, Any]:
        latencies: list[float] = []
        lost = 0

        firsts: list[float] = []

        async def chat_loop(index: int, chat: Any) -> None:
            nonlocal lost
            for k in range(per_chat):
                tag = f"{prefix}-{index}-{k}"
                latency = await self._ask(tag, chat, user, within)
                if latency is None:
                    lost += per_chat - k  # this one and the ones never sent
                    return
                latencies.append(latency)
                firsts.append(self.first_latency.pop(tag))

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(chat_loop(i, c) for i, c in enumerate(chats)))
        return {"latencies": latencies, "lost": lost, "elapsed_s": time.perf_counter() - t0,
                "fake_cpu_s": time.process_time() - cpu0, "first": firsts}

    async def _open(self, chats: list[Any], user: Any, interval: float, duration: float,
                    prefix: str, within: float) -> dict[str, Any]:
        latencies: list[float] = []
        firsts: list[float] = []
        lost = 0
        end = time.perf_counter() + duration

        async def chat_loop(index: int, chat: Any) -> None:
            nonlocal lost
            await asyncio.sleep(interval * index / len(chats))  # spread the starts
            asks: list[asyncio.Task[float | None]] = []
            k = 0
            while time.perf_counter() < end:
                tag = f"{prefix}-{index}-{k}"
                left = end - time.perf_counter() + within
                asks.append(asyncio.ensure_future(self._ask(tag, chat, user, left)))
                k += 1
                await asyncio.sleep(interval)
            for latency in await asyncio.gather(*asks):
                if latency is None:
                    lost += 1
                else:
                    latencies.append(latency)
            for j in range(k):  # first-words times, as the closed loop's
                first = self.first_latency.pop(f"{prefix}-{index}-{j}", None)
                if first is not None:
                    firsts.append(first)

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(chat_loop(i, c) for i, c in enumerate(chats)))
        return {"latencies": latencies, "lost": lost, "elapsed_s": time.perf_counter() - t0,
                "fake_cpu_s": time.process_time() - cpu0, "first": firsts}


# -- the child process ----------------------------------------------------------------------------


async def _pipes(proto_out: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(proto_out, "wb"))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def _serve(platform: str, config: dict[str, Any], proto_out: int) -> None:
    driver = DRIVERS[platform]
    reader, writer = await _pipes(proto_out)

    async def reply(body: dict[str, Any]) -> None:
        writer.write(json.dumps(body).encode() + b"\n")
        await writer.drain()

    async with driver.make(config) as fake:
        control = FakeControl(driver, fake)
        await reply({"ready": driver.info(fake), "pid": os.getpid()})
        next_line = asyncio.ensure_future(reader.readline())
        try:
            while line := await next_line:
                req = json.loads(line)
                # The benchmark sends nothing while a request is in flight, so a line arriving
                # now is end of file: the benchmark is gone and the request is moot.
                next_line = asyncio.ensure_future(reader.readline())
                work = asyncio.ensure_future(control.handle(req))
                await asyncio.wait({work, next_line}, return_when=asyncio.FIRST_COMPLETED)
                if not work.done():
                    work.cancel()
                    break
                await reply(work.result())
                if req.get("op") == "quit":
                    break
        finally:
            next_line.cancel()


def main() -> None:
    platform, config = sys.argv[1], json.loads(sys.argv[2])
    # The protocol gets the real stdout; anything else printed (a stray log line) goes to
    # stderr instead of corrupting it.
    proto_out = os.dup(1)
    os.dup2(2, 1)
    from geode.logging import configure_logging

    configure_logging(level="ERROR")
    asyncio.run(_serve(platform, config, proto_out))


if __name__ == "__main__":
    main()
