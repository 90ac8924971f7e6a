"""What the operator console costs ``geode serve`` per reply: CPU of the serve process.

A real ``geode serve`` (its own ``GEODE_HOME``, SQLite store, the scripted model answering
at once) bound to one Telegram private chat, so that every message is a turn of the same
thread. Only the serve process's CPU is measured (utime + stime of every thread, from
``/proc/<pid>/stat``) over ``--replies`` replies sent one after the other (each sent when
the previous answer is visible). The Telegram fake runs in this process; the browsers run
in a process of their own (this script with ``--viewers``, signed in with a one-time link
from ``geode console link``), so their CPU is not the server's.

Default: **0 vs N viewers in one serve process.** Each round measures a phase with nobody
connected and a phase with ``--viewers-n`` live streams
(server-sent events, ``/threads/KEY/events``) open on that very thread, every reply's
timeline rows fanned out to each of them. Each phase starts a new session in the thread
(``/new``) and warms it up: a reply costs more the longer its conversation, so every
phase's conversation is as long as the others'. The phases' order alternates from round to
round (a shared machine's load moves, a process warms up). The table gives each side's
median CPU ms per reply with its spread (lowest-highest), and the rounds' paired
difference (N viewers minus nobody, same round).

``--processes``: the console off, on with nobody connected, and N viewers, each a fresh
serve process per round (what the console costs when no browser is connected).

Nothing is asserted here.

Run: ``python benchmarks/bench_console.py [--replies 40] [--rounds 7] [--viewers-n 50]``
(``--processes`` for the cross-process comparison; ``--profile FILE`` writes a cProfile of
the serve process of the in-process comparison).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOKEN = "123456:BENCH-TOKEN"
USER = 42
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "TELEGRAM_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(GEODE_HOME=str(home), TELEGRAM_BOT_TOKEN=TOKEN, **extra)
    return env


def _config(fake: Any, *, console_port: int | None) -> str:
    config = f"""
[lanes]
global_cap = 16
channel_cap = 16

[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout_s = 1
progress_edit_interval_s = 0
stream = false
rate_group_per_min = 0

[[bindings]]
platform = "telegram"
channel = "{USER}"
allow_users = ["{USER}"]
"""
    if console_port is not None:
        config += (f'\n[console]\nenabled = true\nlisten = "127.0.0.1:{console_port}"\n'
                   f'operators = ["telegram:{USER}"]\n')
    return config


@contextlib.asynccontextmanager
async def serve(fake: Any, *, console: bool, profile: str = ""
                ) -> AsyncIterator[tuple[int, Path, str]]:
    """A ``geode serve`` on a fresh home: its pid, home and console URL ("" when off);
    ``profile``: run it under cProfile, writing the stats there when it stops."""
    home = Path(tempfile.mkdtemp(prefix="geode-bench-console-"))
    port = _free_port() if console else None
    (home / "config.toml").write_text(_config(fake, console_port=port))
    script = home / "script.json"
    script.write_text(json.dumps(["answer"]))  # each turn replays it from the start
    health = _free_port()
    env = _env(home, GEODE_SCRIPTED_MODEL=str(script), GEODE_HEALTH_PORT=str(health))
    command = ["-m", "cProfile", "-o", profile] if profile else []
    with (home / "serve.log").open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *command, "-m", "geode", "serve", env=env, cwd=str(home),
            stdout=log, stderr=log, start_new_session=True)
    try:
        await _until(lambda: _get(f"http://127.0.0.1:{health}/readyz"), proc, home)
        yield proc.pid, home, f"http://127.0.0.1:{port}" if port else ""
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def _get(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


async def _until(check: Any, proc: asyncio.subprocess.Process, home: Path) -> None:
    end = time.monotonic() + 90
    while not await asyncio.to_thread(check):
        if proc.returncode is not None or time.monotonic() > end:
            raise RuntimeError("geode serve did not get ready:\n"
                               + (home / "serve.log").read_text(errors="replace")[-3000:])
        await asyncio.sleep(0.2)


class Chat:
    """The private chat: each message sent waits for its answer."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.asked = 0

    def _answers(self) -> int:
        return sum(m.plain_text == "answer" for m in self.fake.messages_in(USER, from_bot=True))

    async def exchange(self) -> None:
        """One message in the chat (the same thread every time), until its answer is
        visible."""
        self.asked += 1
        self.fake.user_says(USER, f"question {self.asked}", from_user=USER, chat_type="private")
        await self.fake.wait_until(lambda: self._answers() >= self.asked, within=60)

    async def new_session(self) -> None:
        """``/new``: the thread's next turns start a conversation of their own."""
        before = len(self.fake.messages_in(USER, from_bot=True))
        self.fake.user_says(USER, "/new", from_user=USER, chat_type="private")
        await self.fake.wait_until(
            lambda: len(self.fake.messages_in(USER, from_bot=True)) > before, within=60)

    async def replies(self, pid: int, n: int) -> tuple[float, float]:
        """``n`` exchanges: the serve's CPU ms and the wall-clock ms, per reply."""
        cpu0, t0 = cpu_s(pid), time.perf_counter()
        for _ in range(n):
            await self.exchange()
        cpu1, t1 = cpu_s(pid), time.perf_counter()
        return (cpu1 - cpu0) * 1000 / n, (t1 - t0) * 1000 / n


class Viewers:
    """The browsers: a process of their own, signed in once, opening and closing ``n``
    live streams of the chat's thread on command."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, home: Path, base: str, n: int) -> AsyncIterator[Viewers]:
        made = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "geode", "console", "link", "--as",
                             f"telegram:{USER}"], env=_env(home), capture_output=True,
            text=True, check=True, timeout=60)
        token = re.search(r"token=([\w-]+)", made.stdout)
        assert token is not None, made.stdout + made.stderr
        # the token on stdin, not in argv: it may start with "-"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--viewers", base, str(n),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            start_new_session=True)
        viewers = cls(proc)
        try:
            await viewers._say(token.group(1))
            yield viewers
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()

    async def _say(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if not answer:
            raise RuntimeError("the viewers' process ended")
        result: dict[str, Any] = json.loads(answer)
        return result

    async def open(self) -> dict[str, Any]:
        return await self._say("open")

    async def close(self) -> dict[str, Any]:
        return await self._say("close")


async def paired(args: argparse.Namespace) -> None:
    """0 vs N viewers in one serve process, alternating (the default)."""
    from bots.testing.telegram import FakeTelegramServer

    nobody, watched = "nobody", f"{args.viewers_n} viewers"
    results: dict[str, list[float]] = {nobody: [], watched: []}
    events: list[int] = []
    walls: dict[str, list[float]] = {nobody: [], watched: []}
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
        fake.add_chat(USER, chat_type="private")
        chat = Chat(fake)
        async with serve(fake, console=True, profile=args.profile) as (pid, home, base):
            await chat.exchange()  # the thread exists: the viewers find it
            async with Viewers.started(home, base, args.viewers_n) as browsers:
                for r in range(args.rounds):
                    order = [nobody, watched] if r % 2 == 0 else [watched, nobody]
                    for side in order:
                        # each phase a conversation of its own, as long as the others' (a
                        # reply costs more the longer its conversation)
                        await chat.new_session()
                        for _ in range(args.warm):
                            await chat.exchange()
                        if side == watched:
                            await browsers.open()
                        await asyncio.sleep(2)  # the streams opened, the feed polls
                        cpu, wall = await chat.replies(pid, args.replies)
                        if side == watched:
                            events.append(int((await browsers.close())["events"]))
                        results[side].append(cpu)
                        walls[side].append(wall)
                        print(f"round {r + 1} {side:>12}: {cpu:.2f} CPU ms/reply "
                              f"({wall:.0f} ms/reply)", file=sys.stderr)
    diffs = [w - o for w, o in zip(results[watched], results[nobody], strict=True)]
    print(f"\n{args.replies} replies per phase in one thread, {args.rounds} rounds, one serve "
          f"process; each viewer got >= {min(events)} events per phase")
    print(f"{'side':>12} {'cpu ms/reply (median)':>22} {'spread':>14} {'ms/reply':>9}")
    for side in (nobody, watched):
        xs = results[side]
        print(f"{side:>12} {statistics.median(xs):>22.2f} "
              f"{min(xs):>6.2f}-{max(xs):<7.2f} {statistics.median(walls[side]):>9.0f}")
    print(f"{'difference':>12} {statistics.median(diffs):>+22.2f} "
          f"{min(diffs):>+6.2f}..{max(diffs):<+7.2f}  (per round: "
          + ", ".join(f"{d:+.2f}" for d in diffs) + ")")


async def run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    from bots.testing.telegram import FakeTelegramServer

    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
        fake.add_chat(USER, chat_type="private")
        chat = Chat(fake)
        async with serve(fake, console=side != "console off") as (pid, home, base):
            for _ in range(args.warm):  # the thread exists, first imports and queries done
                await chat.exchange()
            seen: dict[str, Any] = {}
            async with contextlib.AsyncExitStack() as stack:
                if side.endswith("viewers"):
                    browsers = await stack.enter_async_context(
                        Viewers.started(home, base, args.viewers_n))
                    seen.update(await browsers.open())
                await asyncio.sleep(2)  # the streams opened, the feed polls
                cpu, wall = await chat.replies(pid, args.replies)
                if side.endswith("viewers"):
                    seen.update(await browsers.close())
            return {"side": side, "cpu_ms": cpu, "s_per_reply": wall / 1000, **seen}


async def processes(args: argparse.Namespace) -> None:
    """The console off, on, and N viewers: a fresh serve process per side and round."""
    sides = ["console off", "console on", f"{args.viewers_n} viewers"]
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in sides:
            row = await run_side(side, args)
            results[side].append(row)
            extra = (f", {row['streams']} streams open, {row.get('events', 0)} events each"
                     if "streams" in row else "")
            print(f"round {r + 1} {side:>12}: {row['cpu_ms']:.2f} CPU ms/reply "
                  f"({row['s_per_reply'] * 1000:.0f} ms/reply){extra}", file=sys.stderr)
    off = statistics.median(x["cpu_ms"] for x in results["console off"])
    print(f"\n{args.replies} replies in one thread, {args.rounds} rounds (medians)")
    print(f"{'side':>12} {'cpu ms/reply':>12} {'spread':>14} {'vs off':>9}")
    for side in sides:
        xs = [x["cpu_ms"] for x in results[side]]
        cpu = statistics.median(xs)
        print(f"{side:>12} {cpu:>12.2f} {min(xs):>6.2f}-{max(xs):<7.2f} {cpu - off:>+9.2f}")


# -- the viewers' process ---------------------------------------------------------------------


async def watch(base: str, n: int) -> None:
    """Sign in (the link's token: the first line of stdin), then on each ``open`` line hold
    ``n`` streams of the (only) thread open until a ``close`` line; stdin's end stops."""
    import aiohttp

    loop = asyncio.get_running_loop()

    async def line() -> str:
        text: str = await loop.run_in_executor(None, sys.stdin.readline)
        return text.strip()

    def answer(data: dict[str, Any]) -> None:
        print(json.dumps(data), flush=True)

    jar = aiohttp.CookieJar(unsafe=True)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(base, cookie_jar=jar, connector=connector) as http:
        async with http.post("/signin", data={"token": await line()},
                             allow_redirects=False) as r:
            assert r.status == 303, await r.text()
        async with http.get("/threads", headers={"Accept": "application/json"}) as r:
            groups = (await r.json())["groups"]
        url = next(t["url"] for g in groups for t in g["threads"])
        answer({"ready": True})
        while await line() == "open":
            counts = [0] * n
            opened = asyncio.Event()
            started = 0

            async def stream(k: int, counts: list[int] = counts,
                             opened: asyncio.Event = opened) -> None:
                nonlocal started
                async with http.get(url + "/events") as r:
                    assert r.status == 200
                    started += 1
                    if started == n:
                        opened.set()
                    async for text in r.content:
                        if text.startswith(b"event: "):
                            counts[k] += 1

            tasks = [asyncio.create_task(stream(k)) for k in range(n)]
            await asyncio.wait_for(opened.wait(), 60)
            answer({"streams": n})
            if await line() != "close":
                break
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            answer({"events": min(counts)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replies", type=int, default=40)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--viewers-n", type=int, default=50)
    parser.add_argument("--processes", action="store_true",
                        help="the console off / on / N viewers, a serve process each")
    parser.add_argument("--profile", default="",
                        help="write a cProfile of the serve process here (in-process mode)")
    parser.add_argument("--viewers", nargs=2, metavar=("BASE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewers:
        base, n = args.viewers
        asyncio.run(watch(base, int(n)))
        return
    asyncio.run(processes(args) if args.processes else paired(args))


if __name__ == "__main__":
    main()
