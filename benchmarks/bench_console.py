"""What the operator console costs ``geode serve`` per reply: CPU of the serve process.

Three sides, each a fresh real ``geode serve`` (its own ``GEODE_HOME``, SQLite store, the
scripted model answering at once) bound to one Telegram private chat, so that every message
is a turn of the same thread:

* ``console off``: no ``[console]``;
* ``console on``: ``[console] enabled``, nobody connected;
* ``N viewers``: the console on and N browsers' live streams (server-sent events,
  ``/threads/KEY/events``) open on that very thread, so every reply's timeline rows are
  fanned out to each of them. The viewers run in their own process (this script with
  ``--viewers``), signed in with a one-time link from ``geode console link``.

The Telegram fake runs in this process: only the serve process's CPU is measured (utime +
stime of every thread, from ``/proc/<pid>/stat``), over ``--replies`` replies sent one after
the other (each sent when the previous answer is visible), after ``--warm`` warm-up replies.
Sides alternate over ``--rounds`` rounds (a shared machine's load moves); the table gives
each side's median CPU ms per reply and the difference to ``console off``. Nothing is
asserted here.

Run: ``python benchmarks/bench_console.py [--replies 40] [--rounds 3] [--viewers-n 50]``.
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
async def serve(fake: Any, *, console: bool) -> AsyncIterator[tuple[int, Path, str]]:
    """A ``geode serve`` on a fresh home: its pid, home and console URL ("" when off)."""
    home = Path(tempfile.mkdtemp(prefix="geode-bench-console-"))
    port = _free_port() if console else None
    (home / "config.toml").write_text(_config(fake, console_port=port))
    script = home / "script.json"
    script.write_text(json.dumps(["answer"]))  # each turn replays it from the start
    health = _free_port()
    env = _env(home, GEODE_SCRIPTED_MODEL=str(script), GEODE_HEALTH_PORT=str(health))
    with (home / "serve.log").open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "geode", "serve", env=env, cwd=str(home), stdout=log,
            stderr=log, start_new_session=True)
    try:
        await _until(lambda: _get(f"http://127.0.0.1:{health}/readyz"), proc, home)
        yield proc.pid, home, f"http://127.0.0.1:{port}" if port else ""
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
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


async def exchange(fake: Any, i: int) -> None:
    """The ``i``-th message in the private chat (the same thread every time), until its
    answer is visible (the chat's ``i + 1``-th)."""
    fake.user_says(USER, f"question {i}", from_user=USER, chat_type="private")
    await fake.wait_until(lambda: sum(m.plain_text == "answer"
                                      for m in fake.messages_in(USER, from_bot=True)) > i,
                          within=60)


@contextlib.asynccontextmanager
async def viewers(home: Path, base: str, n: int) -> AsyncIterator[dict[str, Any]]:
    """``n`` live streams of the chat's thread, in a process of their own."""
    made = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "geode", "console", "link", "--as",
                         f"telegram:{USER}"], env=_env(home), capture_output=True,
        text=True, check=True, timeout=60)
    token = re.search(r"token=([\w-]+)", made.stdout)
    assert token is not None, made.stdout + made.stderr
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--viewers", base, token.group(1), str(n),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        start_new_session=True)
    assert proc.stdout is not None and proc.stdin is not None
    ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
    try:
        yield ready
    finally:
        proc.stdin.close()
        ended = await asyncio.wait_for(proc.stdout.readline(), 30)
        ready.update(json.loads(ended) if ended else {})
        await proc.wait()


async def run_side(side: str, args: argparse.Namespace) -> dict[str, Any]:
    from bots.testing.telegram import FakeTelegramServer

    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as fake:
        fake.add_chat(USER, chat_type="private")
        async with serve(fake, console=side != "console off") as (pid, home, base):
            for i in range(args.warm):  # the thread exists, first imports and queries done
                await exchange(fake, i)
            watching = (viewers(home, base, args.viewers_n) if side.endswith("viewers")
                        else contextlib.nullcontext({}))
            async with watching as seen:
                await asyncio.sleep(2)  # the streams opened, the feed polls
                cpu0, t0 = cpu_s(pid), time.perf_counter()
                for i in range(args.warm, args.warm + args.replies):
                    await exchange(fake, i)
                cpu1, t1 = cpu_s(pid), time.perf_counter()
            return {"side": side, "cpu_ms": (cpu1 - cpu0) * 1000 / args.replies,
                    "s_per_reply": (t1 - t0) / args.replies, **seen}


async def bench(args: argparse.Namespace) -> None:
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
    print(f"{'side':>12} {'cpu ms/reply':>12} {'vs off':>9} {'ratio':>6}")
    for side in sides:
        cpu = statistics.median(x["cpu_ms"] for x in results[side])
        print(f"{side:>12} {cpu:>12.2f} {cpu - off:>+9.2f} {cpu / off:>6.2f}")


# -- the viewers' process ---------------------------------------------------------------------


async def watch(base: str, token: str, n: int) -> None:
    """Sign in, then hold ``n`` streams of the (only) thread open until stdin closes."""
    import aiohttp

    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(base, cookie_jar=jar) as http:
        async with http.post("/signin", data={"token": token}, allow_redirects=False) as r:
            assert r.status == 303, await r.text()
        async with http.get("/threads", headers={"Accept": "application/json"}) as r:
            groups = (await r.json())["groups"]
        [thread] = [t for g in groups for t in g["threads"]]
        counts = [0] * n
        opened = asyncio.Event()
        started = 0

        async def stream(k: int) -> None:
            nonlocal started
            async with http.get(thread["url"] + "/events") as r:
                assert r.status == 200
                started += 1
                if started == n:
                    opened.set()
                async for line in r.content:
                    if line.startswith(b"event: "):
                        counts[k] += 1

        tasks = [asyncio.create_task(stream(k)) for k in range(n)]
        await asyncio.wait_for(opened.wait(), 60)
        print(json.dumps({"streams": n}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        print(json.dumps({"events": min(counts)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replies", type=int, default=40)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--viewers-n", type=int, default=50)
    parser.add_argument("--viewers", nargs=3, metavar=("BASE", "TOKEN", "N"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.viewers:
        base, token, n = args.viewers
        asyncio.run(watch(base, token, int(n)))
        return
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
