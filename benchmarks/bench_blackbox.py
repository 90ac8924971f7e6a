"""Black-box channel benchmark: GEODE measured as users run it (issue 17).

Four processes per side, nothing of the bot in the benchmark's own process:

* the Telegram Bot API fake (``_fake_proc.py telegram``), a fresh one per side; it pushes
  the users' messages and timestamps each answer as it becomes visible;
* an OpenAI-compatible model server (``_model_proc.py``) answering at once with
  ``answer to: <tag>`` (or after ``--model-latency`` s);
* **GEODE**: a real ``geode serve`` subprocess on its own ``GEODE_HOME`` whose
  ``config.toml`` is an operator's (``[model] default = "openai:bench-model"``, the
  ``[channels.telegram]`` table, one ``[[bindings]]`` per group chat, SQLite store), with
  ``OPENAI_BASE_URL`` pointing at the model server; run with Telegram pacing on (the
  defaults, ``rate_overall_per_s = 30``, ``rate_group_per_min = 20``) and off (both 0);
* **floor**: ``_floor_bot.py``, python-telegram-bot + one ``AsyncOpenAI`` call + one
  ``sendMessage`` per message, on the same kind of fakes.
* **floor-visible**: the same floor bot making the platform calls a GEODE reply makes (the
  👀 reaction, Discord's thread, a "⏳ Working…" message, the answer as its edit), still
  with no store: what those visible calls cost alone, so GEODE's own cost can be told apart.

Loads (each message a mention in a group chat, i.e. a new GEODE thread):

* ``seq``: one chat, ``--seq`` messages, each sent when the previous answer is visible;
* ``light``: ``--chats`` chats, each sending a message every ``--interval`` s (open loop,
  starts spread) for ``--duration`` s;
* ``closed``: ``--chats`` chats, each sending its next message when its answer lands,
  ``--per-chat`` messages each.

Columns: p50 / p99 latency from the push to the visible final answer (both instants read in
the fake's process); replies/s; **CPU ms per reply of the bot process** (utime + stime from
``/proc/<pid>/stat``, all its threads); Bot API calls per reply (``getUpdates`` excluded);
``loop ms``: of that CPU, the main thread's (the event loop; GEODE's store commits, aiosqlite
and file appends run on worker threads); messages lost (not answered within the bound); the
bot's RSS after the load and its peak (``VmHWM``) so far; ``idle`` is its RSS once ready,
before any message. MB = 2**20 bytes.

GEODE's ``[lanes]`` are raised to ``--lanes`` (default 64) as an operator serving 50 busy
chats would; the shipped defaults (8 / 6 turns at once) queue a 50-chat closed loop by
design. Nothing here is asserted; ``tests/benchmarks/test_bench_blackbox_smoke.py`` runs it
with tiny parameters so that it keeps working.

Run: ``python benchmarks/bench_blackbox.py [--chats 50] [--seq 20] [--per-chat 6]
[--interval 8] [--duration 24] [--sides floor floor-visible geode-paced geode-unpaced]
[--burst 1000 [--burst-latency 2] [--burst-only]]``. ``--burst N`` then runs GEODE alone
(pacing off, lanes and ``max_concurrent_threads`` = N) under N mentions at once, each a new
thread, the model answering after ``--burst-latency`` s: how many were answered, CPU per
reply, peak RSS (target: all, <= 300 MB). ``--baseline DIR [--rounds N]`` also runs GEODE from
another checkout (a ``git worktree`` of the commit to compare with), alternating with this
one's, its rows marked ``@base``, then each side's medians and the ratios: on a shared machine
only runs made side by side tell a regression from the load. ``--memory 12 --memory-compare
--rounds 5`` runs each GEODE side twice a round, memory off and on (off first in even
rounds, on first in odd ones; ``memory = "channel"`` on every binding, 12 entries seeded: 6
about the users, 6 per chat; rows marked ``+mem``), and prints the ratios on/off of the
medians and of each round.
``--stream-tokens 400 [--tokens-per-s 40]`` runs the streaming load instead of the table: the
model streams each answer (the floors make one non-streaming call), one chat then ``--chats``
chats at once; per side the time to the answer's first visible words and to the complete
answer, platform calls per reply, the platform's 429s (the Telegram fake enforces 30 messages a
second) and CPU per reply; with ``--profile DIR`` GEODE runs the streaming loads under yappi
(``DIR/<platform>-<side>-stream.pstat``). ``--stream-light`` adds ``light 10`` between the two:
10 chats, each sending a message every two answer-lengths for ``--duration`` s. Discord's
conversations are then one channel each, as 50 users' chats would be (``--discord-channels
one``: all in the fake's one channel, sharing its rate bucket, as in the table's loads);
``--rounds N`` repeats the streaming loads and prints each row's medians.
Telegram, Slack (Socket Mode; the floor is a slack-bolt ``AsyncApp`` answering in the
mention's thread) and Discord (discord.py on both sides; all conversations in the fake's one
channel, each mention a thread of its own) are covered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TOKEN = "123456:BENCH-TOKEN"
USER = 42
CLK_TCK = os.sysconf("SC_CLK_TCK")
SIDES = ("floor", "floor-visible", "geode-paced", "geode-unpaced")
#: the baselines: no GEODE in them (``_floor_bot.py``)
FLOORS = ("floor", "floor-visible")
SLACK_USER = "U0ALICE"
DISCORD_TOKEN = "bench-bot-token"


@dataclass(frozen=True)
class PlatformSpec:
    """What differs per platform: the fake, the chats, the config section, the tokens."""

    name: str
    fake_config: dict[str, Any]
    user: Any
    #: Telegram pacing is a Telegram setting: other platforms run one GEODE side
    has_pacing: bool
    #: more lines of the channel's section (``--discord-reply inline``)
    options: str = ""

    def chats(self, n: int, fake: dict[str, Any]) -> list[Any]:
        """The chats of ``n`` users' conversations. Discord: the fake's one channel, where
        every mention opens a thread of its own (each conversation is its threads), or a
        channel each when the fake has that many (the streaming load's 50 chats)."""
        if self.name == "slack":
            return [f"C{1000 + i}" for i in range(n)]
        if self.name == "discord":
            ids = fake.get("channel_ids") or []
            return ids[:n] if n > 1 and len(ids) >= n else [fake["channel_id"]] * n
        return [-1001000 - i for i in range(n)]

    def audience(self, fake: dict[str, Any]) -> Any:
        return fake["user_id"] if self.name == "discord" else self.user

    def section(self, fake: dict[str, Any], paced: bool, lanes: int) -> str:
        threads = f"max_concurrent_threads = {max(lanes, 64)}\n"
        if self.name == "discord":
            return (f'[channels.discord]\napi_base = "{fake["api_base"]}"\n'
                    f'gateway_url = "{fake["gateway_url"]}"\n' + threads + self.options)
        if self.name == "slack":
            return (f'[channels.slack]\nbase_url = "{fake["base_url"]}"\nmode = "socket"\n'
                    + threads)
        pacing = "" if paced else "rate_overall_per_s = 0\nrate_group_per_min = 0\n"
        return (f'[channels.telegram]\nbase_url = "{fake["base_url"]}"\n'
                f'base_file_url = "{fake["base_file_url"]}"\n{threads}{pacing}')

    def env(self, fake: dict[str, Any]) -> dict[str, str]:
        if self.name == "discord":
            return {"DISCORD_BOT_TOKEN": DISCORD_TOKEN}
        if self.name == "slack":
            return {"SLACK_BOT_TOKEN": fake["bot_token"], "SLACK_APP_TOKEN": fake["app_token"],
                    "SLACK_SIGNING_SECRET": fake["signing_secret"]}
        return {"TELEGRAM_BOT_TOKEN": TOKEN}

    def floor_argv(self, fake: dict[str, Any], model_url: str, visible: bool) -> list[str]:
        base = fake["api_base"] if self.name == "discord" else fake["base_url"]
        argv = [sys.executable, str(HERE / "_floor_bot.py"), *(["--visible"] if visible else []),
                self.name, base, model_url]
        if self.name == "slack":
            argv += [fake["bot_token"], fake["app_token"]]
        if self.name == "discord":
            argv += [fake["gateway_url"], DISCORD_TOKEN]
        return argv


PLATFORMS = {
    "telegram": PlatformSpec("telegram", {"token": TOKEN, "bot_username": "geode_bot"}, USER,
                             has_pacing=True),
    "slack": PlatformSpec("slack", {}, SLACK_USER, has_pacing=False),
    "discord": PlatformSpec("discord", {"token": DISCORD_TOKEN}, None, has_pacing=False),
}


# -- processes ------------------------------------------------------------------------------


def _env(code: Path = REPO, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GEODE_", "TELEGRAM_", "SLACK_", "OPENAI_"))}
    # run this checkout's code (or --baseline's), whatever `pip install -e` points at
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


@dataclass
class Child:
    proc: asyncio.subprocess.Process
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        """One request to a ``_fake_proc`` child (JSON line in, JSON line out)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fake process exited (code {await self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"fake: {op}: {reply['error']}")
        return reply


@contextlib.asynccontextmanager
async def _child(*argv: str, env: dict[str, str] | None = None, json_ready: bool = True,
                 stderr: Any = None) -> AsyncIterator[Child]:
    """A child process, stopped on exit (stdin closed, SIGTERM, then SIGKILL)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env or _env(), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE if json_ready else asyncio.subprocess.DEVNULL,
        stderr=stderr, start_new_session=True, limit=1 << 24)
    child = Child(proc)
    try:
        if json_ready:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line:
                raise RuntimeError(f"{argv[1]} exited (code {await proc.wait()})")
            child.ready = json.loads(line)
        yield child
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                assert proc.stdin is not None
                proc.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread), from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def loop_cpu_s(pid: int) -> float:
    """CPU seconds of the process's main thread (GEODE's event loop; the rest of the bot's
    CPU is its worker threads': the store's commits and aiosqlite, file appends)."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until_ready(port: int, proc: asyncio.subprocess.Process, within: float = 60) -> None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if proc.returncode is not None:
            raise RuntimeError(f"geode serve exited (code {proc.returncode})")
        try:
            await asyncio.to_thread(
                urllib.request.urlopen, f"http://127.0.0.1:{port}/readyz", timeout=1)
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise TimeoutError("geode serve not ready")


# -- the sides ------------------------------------------------------------------------------


def geode_config(platform: PlatformSpec, fake: dict[str, Any], *, n_chats: int, paced: bool,
                 lanes: int, memory: int = 0) -> str:
    """An operator's config.toml: the model, lanes, the channel, one binding per chat
    (``memory``: entries seeded, so each binding turns memory on)."""
    bindings = "".join(
        f'\n[[bindings]]\nplatform = "{platform.name}"\nchannel = "{c}"\n'
        f'allow_users = ["{platform.audience(fake)}"]\n'
        + ('memory = "channel"\n' if memory else "")
        for c in dict.fromkeys(platform.chats(n_chats, fake)))
    return (f'[model]\ndefault = "openai:bench-model"\n\n'
            f"[lanes]\nglobal_cap = {lanes}\nchannel_cap = {lanes}\n\n"
            f"{platform.section(fake, paced, lanes)}{bindings}")


async def seed_memory(home: Path, platform: PlatformSpec, fake: dict[str, Any], *,
                      n_chats: int, entries: int) -> None:
    """``entries`` memory entries each turn's prompt shows: half about the audience (user
    memory), half for each bound chat (channel memory). Written with this checkout's code."""
    from geode.store import open_store
    from geode.store.memory import MemoryAudit, MemoryStore

    audit = MemoryAudit(by="bench", via="cli")
    user = f"{platform.name}:{platform.audience(fake)}"
    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        memory = MemoryStore(store=store)
        for i in range(entries - entries // 2):
            await memory.add(scope="user", owner=user, audit=audit,
                             text=f"Fact {i} about this person: prefers answers in short "
                                  "bullet points and metric units.")
        for c in dict.fromkeys(platform.chats(n_chats, fake)):
            for i in range(entries // 2):
                await memory.add(scope="channel", owner=f"{platform.name}:{c}", audit=audit,
                                 text=f"Channel fact {i}: the team deploys on Tuesdays, "
                                      "standup is at 09:30 UTC.")


@contextlib.asynccontextmanager
async def geode_side(platform: PlatformSpec, fake: dict[str, Any], model_url: str, *,
                     n_chats: int, paced: bool, lanes: int,
                     profile: Path | None = None, code: Path = REPO,
                     memory: int = 0) -> AsyncIterator[int]:
    home = Path(tempfile.mkdtemp(prefix="geode-bench-"))
    try:
        (home / "config.toml").write_text(geode_config(
            platform, fake, n_chats=n_chats, paced=paced, lanes=lanes, memory=memory))
        if memory:
            await seed_memory(home, platform, fake, n_chats=n_chats, entries=memory)
        port = _free_port()
        env = _env(code, GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(port),
                   OPENAI_BASE_URL=model_url, OPENAI_API_KEY="bench", **platform.env(fake))
        with (home / "serve.log").open("ab") as log:
            argv = ((sys.executable, str(HERE / "_profiled_serve.py"), str(profile))
                    if profile is not None else (sys.executable, "-m", "geode", "serve"))
            async with _child(*argv, env=env, json_ready=False, stderr=log) as serve:
                await _until_ready(port, serve.proc)
                yield serve.pid
    finally:
        shutil.rmtree(home, ignore_errors=True)


@contextlib.asynccontextmanager
async def floor_side(platform: PlatformSpec, fake: dict[str, Any],
                     model_url: str, visible: bool) -> AsyncIterator[int]:
    async with _child(*platform.floor_argv(fake, model_url, visible)) as bot:
        yield bot.pid


# -- loads and the table ----------------------------------------------------------------------


@dataclass
class Row:
    platform: str
    side: str
    load: str
    sent: int
    lost: int
    p50_ms: float
    p99_ms: float
    per_s: float
    cpu_ms: float
    calls: float
    #: of cpu_ms, the main thread's (the event loop)
    loop_ms: float
    rss_mb: float
    peak_mb: float
    idle_mb: float


def _pct(samples: Sequence[float], q: int) -> float:
    if not samples:
        return float("nan")
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


async def measure(platform: str, side: str, load: str, fake: Child, pid: int, idle_mb: float,
                  op: str, **args: Any) -> Row:
    calls0 = (await fake.call("api_calls"))["calls"]
    cpu0, loop0 = cpu_s(pid), loop_cpu_s(pid)
    result = await fake.call(op, **args)
    cpu1, loop1 = cpu_s(pid), loop_cpu_s(pid)
    calls1 = (await fake.call("api_calls"))["calls"]
    lat = [x * 1000 for x in result["latencies"]]
    replies = len(lat)
    per = max(replies, 1)
    return Row(platform=platform, side=side, load=load, sent=replies + result["lost"],
               lost=result["lost"],
               p50_ms=_pct(lat, 50), p99_ms=_pct(lat, 99),
               per_s=replies / result["elapsed_s"], cpu_ms=(cpu1 - cpu0) * 1000 / per,
               loop_ms=(loop1 - loop0) * 1000 / per, calls=(calls1 - calls0) / per,
               rss_mb=status_mb(pid, "VmRSS"),
               peak_mb=status_mb(pid, "VmHWM"), idle_mb=idle_mb)


def _fake_argv(platform: PlatformSpec) -> tuple[str, ...]:
    return (sys.executable, str(HERE / "_fake_proc.py"), platform.name,
            json.dumps(platform.fake_config))


async def run_side(platform: PlatformSpec, side: str, model_url: str,
                   args: argparse.Namespace, code: Path = REPO,
                   memory: int | None = None) -> list[Row]:
    async with _child(*_fake_argv(platform)) as fake:
        info = fake.ready["ready"]
        if side in FLOORS:
            bot = floor_side(platform, info, model_url, visible=side == "floor-visible")
        else:
            profile = (None if args.profile is None or code != REPO
                       else args.profile.resolve() / f"{platform.name}-{side}-seq.pstat")
            bot = geode_side(platform, info, model_url, n_chats=args.chats,
                             paced=side == "geode-paced", lanes=args.lanes, profile=profile,
                             code=code, memory=args.memory if memory is None else memory)
        async with bot as pid:
            # the push connection, then what it starts (Discord's catch-up of the bound
            # channel's threads after READY) settles before the idle RSS and the loads
            await fake.call("wait_connected", within=30)
            await asyncio.sleep(args.settle)
            idle = status_mb(pid, "VmRSS")
            all_chats = platform.chats(args.chats, info)
            user = platform.audience(info)
            # warm-up: first connections, first session, lazy imports. A bot may not answer
            # what arrives before its gateway session and first catch-up (Discord): retry.
            for attempt in range(10):
                warm = await fake.call("closed", chats=all_chats[:1], user=user, per_chat=3,
                                       prefix=f"q0{attempt}", within=10)
                if not warm["lost"]:
                    break
            name = platform.name
            profiled = args.profile is not None and side not in FLOORS and code == REPO
            if profiled:  # the one-chat load only (see _profiled_serve.py)
                os.kill(pid, signal.SIGUSR1)
            # Paced, one chat runs at Telegram's 20 messages a minute into a group: 20
            # messages already take a minute.
            seq = min(args.seq, 20) if side == "geode-paced" else args.seq
            rows = [await measure(name, side, "seq", fake, pid, idle, "closed",
                                  chats=all_chats[:1], user=user, per_chat=seq,
                                  prefix="q1", within=60 + 3 * seq)]
            if profiled:
                os.kill(pid, signal.SIGUSR2)
                print(f"profile ({name} {side}, one chat, yappi: CPU figures inflated): "
                      f"{args.profile}/{name}-{side}-seq.pstat", file=sys.stderr)
            if args.duration > 0:
                rows.append(await measure(
                    name, side, f"light {args.chats}", fake, pid, idle, "open",
                    chats=all_chats, user=user, interval=args.interval,
                    duration=args.duration, prefix="q2", within=60))
            rows.append(await measure(name, side, f"closed {args.chats}", fake, pid, idle,
                                      "closed", chats=all_chats, user=user,
                                      per_chat=args.per_chat, prefix="q3", within=120))
            return rows


async def run_burst(args: argparse.Namespace) -> None:
    """GEODE alone: ``--burst`` mentions at once (each a new thread) with a slow model."""
    n = args.burst
    model_argv = (sys.executable, str(HERE / "_model_proc.py"),
                  "--latency", str(args.burst_latency))
    telegram = PLATFORMS["telegram"]
    async with _child(*model_argv) as model, _child(*_fake_argv(telegram)) as fake:
        tg = fake.ready["ready"]
        async with geode_side(telegram, tg, model.ready["ready"]["base_url"], n_chats=1,
                              paced=False, lanes=n) as pid:
            await asyncio.sleep(1.0)
            idle = status_mb(pid, "VmRSS")
            chat = telegram.chats(1, tg)
            await fake.call("closed", chats=chat, user=USER, per_chat=1, prefix="q8",
                            within=60)
            cpu0, t0 = cpu_s(pid), time.perf_counter()
            result = await fake.call("round", tags=[f"q9-0-{i}" for i in range(n)],
                                     chat=chat[0], user=USER, within=300, partial=True)
            answered = [x for x in result["latencies"] if x is not None]
            cpu1, elapsed = cpu_s(pid), time.perf_counter() - t0
            peak = status_mb(pid, "VmHWM")
    print(f"burst (telegram): {n} threads at once, model {args.burst_latency} s: answered "
          f"{len(answered)} / {n}, last after {max(answered, default=float('nan')):.1f} s "
          f"(round {elapsed:.1f} s), CPU {1000 * (cpu1 - cpu0) / max(len(answered), 1):.1f} "
          f"ms/reply, idle {idle:.0f} MB, peak RSS {peak:.0f} MB (target <= 300 MB: "
          f"{'met' if peak <= 300 and len(answered) == n else 'NOT met'})")


@dataclass
class StreamRow:
    """One side under the streaming load: the model writes each answer for seconds."""

    platform: str
    side: str
    load: str
    replies: int
    lost: int
    #: push to the answer's first visible words (a streamed draft, or the whole answer)
    first_p50_s: float
    first_p99_s: float
    #: push to the complete answer
    done_p50_s: float
    done_p99_s: float
    calls: float
    throttled: int | None
    cpu_ms: float


async def stream_measure(platform: str, side: str, load: str, fake: Child, pid: int,
                         op: str = "closed", **args: Any) -> StreamRow:
    before = await fake.call("api_calls")
    cpu0 = cpu_s(pid)
    result = await fake.call(op, **args)
    cpu1 = cpu_s(pid)
    after = await fake.call("api_calls")
    done, first = result["latencies"], result["first"]
    per = max(len(done), 1)
    throttled = (None if after["throttled"] is None
                 else after["throttled"] - before["throttled"])
    return StreamRow(platform=platform, side=side, load=load, replies=len(done),
                     lost=result["lost"], first_p50_s=_pct(first, 50),
                     first_p99_s=_pct(first, 99), done_p50_s=_pct(done, 50),
                     done_p99_s=_pct(done, 99), calls=(after["calls"] - before["calls"]) / per,
                     throttled=throttled, cpu_ms=(cpu1 - cpu0) * 1000 / per)


async def run_stream(args: argparse.Namespace) -> list[StreamRow]:
    """The streaming load: the model streams ``--stream-tokens`` tokens at ``--tokens-per-s``
    (the floors make one non-streaming call: they show the answer when it is complete);
    one chat (``--stream-seq`` messages in turn), then ``--chats`` chats at once (one message
    each). The Telegram fake answers 429 beyond 30 messages a second (the Bot API's flood
    control), so a bot that does not pace its edits is seen doing so."""
    model_argv = (sys.executable, str(HERE / "_model_proc.py"), "--latency",
                  str(args.model_latency), "--stream-tokens", str(args.stream_tokens),
                  "--tokens-per-s", str(args.tokens_per_s))
    rows: list[StreamRow] = []
    within = 60 + 3 * args.stream_tokens / args.tokens_per_s
    async with _child(*model_argv) as model:
        url = model.ready["ready"]["base_url"]
        for name in args.platforms:
            spec = PLATFORMS[name]
            if spec.name == "telegram":
                spec = dataclasses.replace(spec, fake_config={**spec.fake_config,
                                                              "flood_per_s": 30})
            if spec.name == "discord" and args.discord_channels == "per-chat":
                spec = dataclasses.replace(spec, fake_config={**spec.fake_config,
                                                              "channels": args.chats})
            if spec.name == "discord" and args.discord_reply == "inline":
                spec = dataclasses.replace(spec, options='reply_mode = "inline"\n')
            for side in args.sides:
                if side == "geode-paced" and not spec.has_pacing:
                    continue
                label = "geode" if side not in FLOORS and not spec.has_pacing else side
                profile = (None if args.profile is None or side in FLOORS
                           else args.profile.resolve() / f"{name}-{side}-stream.pstat")
                async with _child(*_fake_argv(spec)) as fake:
                    info = fake.ready["ready"]
                    bot = (floor_side(spec, info, url, visible=side == "floor-visible")
                           if side in FLOORS else
                           geode_side(spec, info, url, n_chats=args.chats,
                                      paced=side == "geode-paced", lanes=args.lanes,
                                      profile=profile))
                    async with bot as pid:
                        await fake.call("wait_connected", within=30)
                        await asyncio.sleep(args.settle)
                        chats = spec.chats(args.chats, info)
                        user = spec.audience(info)
                        for attempt in range(10):  # warm-up, as in run_side
                            warm = await fake.call("closed", chats=chats[:1], user=user,
                                                   per_chat=1, prefix=f"q4{attempt}",
                                                   within=within)
                            if not warm["lost"]:
                                break
                        if profile is not None:  # every load (see _profiled_serve.py)
                            os.kill(pid, signal.SIGUSR1)
                        rows.append(await stream_measure(
                            name, label, "stream 1", fake, pid, chats=chats[:1], user=user,
                            per_chat=args.stream_seq, prefix="q5", within=within))
                        if args.stream_light:  # 10 chats, each answer alone
                            light = chats[:min(10, len(chats))]
                            rows.append(await stream_measure(
                                name, label, f"light {len(light)}", fake, pid, "open",
                                chats=light, user=user, prefix="q7", within=within,
                                interval=2 * args.stream_tokens / args.tokens_per_s,
                                duration=args.duration))
                        rows.append(await stream_measure(
                            name, label, f"stream {args.chats}", fake, pid, chats=chats,
                            user=user, per_chat=1, prefix="q6", within=within))
                        if profile is not None:
                            os.kill(pid, signal.SIGUSR2)
                            print(f"profile ({name} {side}, streaming, yappi: CPU figures "
                                  f"inflated): {profile}", file=sys.stderr)
    return rows


def print_stream_table(rows: list[StreamRow], args: argparse.Namespace) -> None:
    print(f"streaming: {args.stream_tokens} tokens at {args.tokens_per_s:g}/s "
          f"(model latency {args.model_latency} s)")
    head = (f"{'platform':<9} {'side':<14} {'load':<10} {'replies':>7} {'lost':>4} "
            f"{'first p50 s':>11} {'first p99 s':>11} {'done p50 s':>10} {'done p99 s':>10} "
            f"{'calls/rep':>9} {'429s':>4} {'cpu ms/rep':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.platform:<9} {r.side:<14} {r.load:<10} {r.replies:>7} {r.lost:>4} "
              f"{r.first_p50_s:>11.2f} {r.first_p99_s:>11.2f} {r.done_p50_s:>10.2f} "
              f"{r.done_p99_s:>10.2f} {r.calls:>9.1f} "
              f"{'-' if r.throttled is None else r.throttled:>4} {r.cpu_ms:>10.1f}")


async def run_stream_rounds(args: argparse.Namespace) -> None:
    """The streaming loads ``--rounds`` times: each round's table, then the medians."""
    rows: list[StreamRow] = []
    for n in range(args.rounds):
        got = await run_stream(args)
        if args.rounds > 1:
            print(f"round {n + 1} of {args.rounds}:")
        print_stream_table(got, args)
        rows += got
    if args.rounds > 1:
        print_stream_medians(rows)


def print_stream_medians(rows: list[StreamRow]) -> None:
    """Each streaming row's medians over the rounds (first and done p50 / p99, calls, 429s,
    CPU), with the rounds' first-words p50s."""
    groups: dict[tuple[str, str, str], list[StreamRow]] = {}
    for r in rows:
        groups.setdefault((r.platform, r.side, r.load), []).append(r)
    print(f"\nmedians over the rounds: {'platform':<9} {'side':<14} {'load':<10} n "
          f"first p50 / p99 s, done p50 / p99 s, calls/rep, 429s, cpu ms/rep "
          f"(each round's first p50)")
    for (plat, side, load), got in groups.items():
        def med(field: str, got: list[StreamRow] = got) -> float:
            return statistics.median(getattr(r, field) for r in got)

        throttled = [r.throttled for r in got if r.throttled is not None]
        print(f"  {plat:<9} {side:<14} {load:<10} {len(got)} "
              f"{med('first_p50_s'):.2f} / {med('first_p99_s'):.2f}, "
              f"{med('done_p50_s'):.2f} / {med('done_p99_s'):.2f}, {med('calls'):.1f}, "
              f"{statistics.median(throttled) if throttled else '-'}, {med('cpu_ms'):.1f} "
              f"({' '.join(f'{r.first_p50_s:.2f}' for r in got)})")


def print_table(rows: list[Row]) -> None:
    head = (f"{'platform':<9} {'side':<19} {'load':<9} {'sent':>5} {'lost':>4} {'p50 ms':>8} "
            f"{'p99 ms':>8} "
            f"{'rep/s':>7} {'cpu ms/rep':>10} {'calls/rep':>9} {'loop ms':>7} {'idle MB':>7} "
            f"{'rss MB':>7} "
            f"{'peak MB':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.platform:<9} {r.side:<19} {r.load:<9} {r.sent:>5} {r.lost:>4} {r.p50_ms:>8.1f} "
              f"{r.p99_ms:>8.1f} {r.per_s:>7.1f} {r.cpu_ms:>10.2f} {r.calls:>9.2f} "
              f"{r.loop_ms:>7.2f} {r.idle_mb:>7.0f} {r.rss_mb:>7.0f} {r.peak_mb:>7.0f}")
    floor = {(r.platform, r.load): r for r in rows if r.side == "floor"}
    visible = {(r.platform, r.load): r for r in rows if r.side == "floor-visible"}
    for r in rows:
        if r.side in FLOORS:
            continue
        f, v = floor.get((r.platform, r.load)), visible.get((r.platform, r.load))
        parts = []
        if f is not None and f.cpu_ms > 0:
            parts.append(f"CPU per reply {r.cpu_ms / f.cpu_ms:.1f}x the floor's, "
                         f"p50 {r.p50_ms - f.p50_ms:+.1f} ms, p99 {r.p99_ms - f.p99_ms:+.1f} ms")
        if v is not None and v.cpu_ms > 0:
            parts.append(f"{r.cpu_ms / v.cpu_ms:.1f}x floor-visible's")
        if parts:
            print(f"{r.platform} {r.side} {r.load}: " + "; ".join(parts))


def describe_checkout(code: Path) -> str:
    """``DIR @ <commit>`` (``+dirty`` with uncommitted changes): which code a GEODE row ran."""
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(code), *a], capture_output=True,
                                  text=True, timeout=10, check=False).stdout.strip()
        except OSError:
            return ""
    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{code} @ {head}{dirty}"


def print_medians(rows: list[Row]) -> None:
    """Each side and load over the rounds: median CPU per reply and replies/s, and each
    GEODE side against its ``@base`` (the --baseline checkout) in the same rounds."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.platform, r.side, r.load), []).append(r)
    print(f"\nmedians over the rounds ({'platform':<9} {'side':<19} {'load':<9} n, "
          "cpu ms/rep [each], rep/s)")
    med: dict[tuple[str, str, str], tuple[float, float]] = {}
    for (plat, side, load), rs in groups.items():
        cpu = statistics.median(r.cpu_ms for r in rs)
        per_s = statistics.median(r.per_s for r in rs)
        med[(plat, side, load)] = (cpu, per_s)
        each = " ".join(f"{r.cpu_ms:.1f}" for r in rs)
        print(f"{plat:<9} {side:<19} {load:<9} {len(rs):>2} {cpu:>7.2f} [{each}] {per_s:>7.1f}")
    for (plat, side, load), (cpu, per_s) in med.items():
        base = med.get((plat, f"{side}@base", load))
        if base is not None and base[0] > 0 and base[1] > 0:
            print(f"{plat} {side} {load}: CPU per reply {cpu / base[0]:.2f}x the baseline's, "
                  f"replies/s {per_s / base[1]:.2f}x")
        off = med.get((plat, side.replace("+mem", ""), load)) if "+mem" in side else None
        if off is not None and off[0] > 0 and off[1] > 0:  # --memory-compare
            # and round by round (the same round's off and on ran back to back): a ratio
            # whose rounds straddle 1.00 is within the noise
            pairs = zip(groups[(plat, side, load)],
                        groups[(plat, side.replace("+mem", ""), load)], strict=False)
            each = " ".join(f"{on.cpu_ms / o.cpu_ms:.2f}" for on, o in pairs if o.cpu_ms > 0)
            print(f"{plat} {side} {load}: CPU per reply {cpu / off[0]:.2f}x memory off's "
                  f"(rounds {each}), replies/s {per_s / off[1]:.2f}x")


async def main(args: argparse.Namespace) -> None:
    model_argv = [sys.executable, str(HERE / "_model_proc.py"),
                  "--latency", str(args.model_latency)]
    rows: list[Row] = []
    if args.burst_only:
        await run_burst(args)
        return
    if args.stream_tokens:
        await run_stream_rounds(args)
        return
    checkouts = [("", REPO)]
    if args.baseline is not None:
        checkouts.append(("@base", args.baseline.resolve()))
    # --memory-compare: each GEODE side with memory off, then on (rows marked +mem)
    memories = ([("", 0), ("+mem", args.memory)] if args.memory_compare
                else [("", args.memory)])
    async with _child(*model_argv) as model:
        url = model.ready["ready"]["base_url"]
        for n in range(args.rounds):
            # alternate which checkout goes first: both see the same drift of the machine
            order = checkouts if n % 2 == 0 else checkouts[::-1]
            for name in args.platforms:
                platform = PLATFORMS[name]
                for side in args.sides:
                    if side == "geode-paced" and not platform.has_pacing:
                        continue
                    label = ("geode" if side not in FLOORS and not platform.has_pacing
                             else side)
                    for suffix, code in order:
                        if side in FLOORS and suffix:
                            continue  # a floor runs no GEODE code: once a round
                        # memory off/on alternate which goes first too (off first in
                        # even rounds), so neither is always the one on a warmer machine
                        mems = memories if n % 2 == 0 else memories[::-1]
                        for mem_suffix, mem in mems if side not in FLOORS else [("", 0)]:
                            rows += [dataclasses.replace(r, side=label + suffix + mem_suffix)
                                     for r in await run_side(platform, side, url, args, code,
                                                             memory=mem)]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"model latency {args.model_latency} s, lanes {args.lanes}")
    for suffix, code in checkouts:
        print(f"geode{suffix or ''}: {describe_checkout(code)}")
    print_table(rows)
    if args.rounds > 1 or args.baseline is not None or args.memory_compare:
        print_medians(rows)
    if args.burst:
        await run_burst(args)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--chats", type=int, default=50)
    p.add_argument("--seq", type=int, default=100, help="messages of the one-chat load")
    p.add_argument("--per-chat", type=int, default=6, help="messages per chat, closed loop")
    p.add_argument("--interval", type=float, default=8.0, help="s between a chat's messages")
    p.add_argument("--duration", type=float, default=24.0, help="s of light load (0: skip)")
    p.add_argument("--lanes", type=int, default=64)
    p.add_argument("--memory", type=int, default=0, metavar="N",
                   help="bindings remember: N memory entries in every prompt (half user, "
                        "half channel)")
    p.add_argument("--memory-compare", action="store_true",
                   help="run each GEODE side with memory off and with --memory N entries "
                        "(rows +mem), then the medians and the ratios on/off")
    p.add_argument("--settle", type=float, default=1.0,
                   help="s between a bot's start and its idle RSS reading and first load")
    p.add_argument("--model-latency", type=float, default=0.0)
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--platforms", nargs="+", choices=sorted(PLATFORMS),
                   default=["telegram", "slack", "discord"])
    p.add_argument("--burst", type=int, default=0,
                   help="then N mentions at once, each a new thread, GEODE alone (1000)")
    p.add_argument("--burst-latency", type=float, default=2.0, help="model s in --burst")
    p.add_argument("--burst-only", action="store_true", help="skip the table")
    p.add_argument("--stream-tokens", type=int, default=0, metavar="N",
                   help="instead of the table: the streaming load, the model writing N "
                        "tokens per answer (400)")
    p.add_argument("--tokens-per-s", type=float, default=40.0, help="the model's pace")
    p.add_argument("--stream-light", action="store_true",
                   help="the streaming load's light row too (10 chats for --duration s)")
    p.add_argument("--stream-seq", type=int, default=3,
                   help="messages of the streaming load's one chat")
    p.add_argument("--discord-reply", choices=("thread", "inline"), default="thread",
                   help="the streaming load's Discord replies: in a thread opened on each "
                        "mention (the default, a request more before the first words) or "
                        "in place")
    p.add_argument("--discord-channels", choices=("per-chat", "one"), default="per-chat",
                   help="the streaming load's Discord chats: a channel each (as users' chats "
                        "are), or all in one channel (its one rate bucket)")
    p.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                   help="also run GEODE from DIR (a worktree of the commit to compare with), "
                        "its rows marked @base, alternating with this checkout's")
    p.add_argument("--rounds", type=int, default=1,
                   help="repeat the loads; then print each side's medians (CPU per reply "
                        "moves +-15%% between runs, more on a loaded machine)")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="run GEODE under yappi and write its one-chat load's profile to DIR "
                        "(with --stream-tokens: the streaming loads')")
    args = p.parse_args(argv)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
