"""Soak benchmark: a real ``geode serve`` driven through many turns, its resources sampled.

Three processes, none of them this one (issue #30): the Telegram Bot API fake (this file run
with ``--fake-child``, on :mod:`bots.testing.telegram`), the OpenAI-compatible model fake
(``_model_proc.py``, answering ``answer to: <tag>`` at once) and **GEODE** as an operator
runs it: ``geode serve`` on its own ``GEODE_HOME`` whose ``config.toml`` has ``[model]
default = "openai:bench-model"``, ``[channels.telegram]`` (pacing off: at Telegram's 20
messages a minute per group the run would take hours), ``[lanes]`` raised to ``--lanes`` and
one ``[[bindings]]`` per chat; SQLite store, default log level (INFO: one ``turn.done`` line
per turn goes to its log, as it would to the journal).

Load: ``--threads`` conversations (forum topics: ``--chats`` group chats, each with
``threads / chats`` topics; a topic is one GEODE thread, so each conversation keeps its one
session and grows its checkpoint chain), each a closed loop: a mention, wait for its answer,
the next. ``--turns`` in all, run as ``--samples`` segments; after each segment (every
thread idle) the serve process is sampled: open fds (``/proc/<pid>/fd``), RSS, threads, CPU,
and the store's files (``geode.db`` and ``geode.db-wal``).

Printed: the curve as a table, then per resource the growth after warm-up (the first
``--warmup`` share of the turns): fds and RSS should be flat (fds: no growth beyond
``--fd-margin``; RSS: the last quarter's slope under ``--rss-slope-mb`` MB per 1,000 turns);
the database grows with what it records (its KB per turn in the last quarter against the
first quarter after warm-up says whether the growth stays linear) and the WAL stays bounded
(checkpointed). And the audit: every tag answered exactly once (lost, duplicated), and the
``turn.done`` lines of serve's log. ``--json-out FILE`` writes all of it as JSON (the CI
smoke test, ``tests/benchmarks/test_bench_soak_smoke.py``, reads it). Nothing is asserted
here: a benchmark measures.

Where the memory is: ``--probe DIR`` runs serve under ``_profiled_serve.py``, whose probe
reads, at every sample and after a full collection, Python's arenas and the bytes of them in
use, glibc's heap in use and free, SQLite's allocator and SQLAlchemy's compiled cache; the
report then says whether the bytes *live* grow (a leak, a cache or map growing with the
turns) or only the bytes the allocators *keep* (``analyse_probes``). ``--memray`` adds
memray with native stacks from the warm-up sample to the last. ``--new-every N`` has each
thread send ``/new`` every N turns, so its history stays short: growth that follows the
threads' history stops there, a leak per turn does not.

Run: ``python benchmarks/bench_soak.py [--turns 10000] [--threads 200] [--chats 20]
[--samples 20] [--lanes 64] [--model-latency 0] [--new-every 0] [--probe DIR [--memray]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SELF = Path(__file__).resolve()
HERE = SELF.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from bench_blackbox import (  # noqa: E402
    TOKEN,
    USER,
    Child,
    _child,
    _env,
    _free_port,
    _until_ready,
    cpu_s,
    status_mb,
)

BOT_USERNAME = "geode_bot"
ANSWER = "answer to: "
NEW_SESSION = "🆕 New session"


# -- the Telegram fake's process ----------------------------------------------------------------


class SoakFake:
    """The fake's control surface: forum topics as threads, closed-loop segments, the
    audit of what the chats show."""

    def __init__(self, fake: Any) -> None:
        from _fake_proc import TELEGRAM, _Answers

        self.fake = fake
        self.answers = _Answers(TELEGRAM.written(fake))
        self.asked: set[str] = set()
        #: turns asked per thread so far (for --new-every), and the "/new" answers seen
        self.turns: dict[tuple[int, int], int] = {}
        self.news: dict[tuple[int, int], int] = {}
        self._news_read = 0

    async def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        try:
            match req.get("op"):
                case "setup":
                    return self._setup(req["chats"], int(req["topics"]))
                case "segment":
                    return await self._segment(req["threads"], int(req["per_thread"]),
                                               str(req["prefix"]), float(req["within"]),
                                               int(req.get("new_every", 0)))
                case "audit":
                    return self._audit()
                case "quit":
                    return {"ok": True}
                case op:
                    raise ValueError(f"unknown op {op!r}")
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _setup(self, chats: list[int], topics: int) -> dict[str, Any]:
        threads = [[chat, self.fake.create_topic(chat, f"topic {i}")]
                   for chat in chats for i in range(topics)]
        return {"threads": threads}

    def _answered(self, tag: str) -> bool:
        self.answers.scan()
        return tag in self.answers.seen

    async def _ask(self, tag: str, chat: int, topic: int, within: float) -> float | None:
        self.asked.add(tag)
        t0 = time.perf_counter()
        self.fake.user_says(chat, f"@{BOT_USERNAME} {tag}", from_user=USER,
                            message_thread_id=topic)
        try:
            await self.fake.wait_until(lambda: self._answered(tag), within=within)
        except TimeoutError:
            return None
        return self.answers.seen[tag] - t0

    def _new_answers(self, chat: int, topic: int) -> int:
        for msg in self.fake.sent[self._news_read:]:
            if (msg.plain_text or "").startswith(NEW_SESSION):
                key = (int(msg.chat_id), int(msg.message_thread_id or 0))
                self.news[key] = self.news.get(key, 0) + 1
        self._news_read = len(self.fake.sent)
        return self.news.get((chat, topic), 0)

    async def _new_session(self, chat: int, topic: int, within: float) -> None:
        """``/new`` in the thread, then wait for its answer: the thread's next turns start
        from an empty history (the thread itself, its binding and lease stay)."""
        before = self._new_answers(chat, topic)
        self.fake.user_says(chat, f"/new@{BOT_USERNAME}", from_user=USER,
                            message_thread_id=topic)
        await self.fake.wait_until(lambda: self._new_answers(chat, topic) > before,
                                   within=within)

    async def _segment(self, threads: list[list[int]], per_thread: int, prefix: str,
                       within: float, new_every: int = 0) -> dict[str, Any]:
        latencies: list[float] = []
        lost = 0

        async def loop(index: int, chat: int, topic: int) -> None:
            nonlocal lost
            for k in range(per_thread):
                n = self.turns.get((chat, topic), 0)
                self.turns[(chat, topic)] = n + 1
                if new_every and n and n % new_every == 0:
                    await self._new_session(chat, topic, within)
                latency = await self._ask(f"{prefix}-{index}-{k}", chat, topic, within)
                if latency is None:
                    lost += per_thread - k  # this one and the ones never sent
                    return
                latencies.append(latency)

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(i, c, t) for i, (c, t) in enumerate(threads)))
        return {"latencies": latencies, "lost": lost, "elapsed_s": time.perf_counter() - t0}

    def _audit(self) -> dict[str, Any]:
        """Per asked tag, the bot's messages in the chats now showing its answer (after
        edits): exactly one each, or it was lost / duplicated."""
        counts: dict[str, int] = {}
        for messages in self.fake._messages.values():
            for msg in messages.values():
                text = msg.plain_text or ""
                if msg.from_bot and text.startswith(ANSWER):
                    tag = text[len(ANSWER):].strip()
                    counts[tag] = counts.get(tag, 0) + 1
        return {"asked": len(self.asked),
                "lost": sorted(t for t in self.asked if t not in counts)[:20],
                "n_lost": sum(t not in counts for t in self.asked),
                "duplicated": sorted(t for t, n in counts.items() if n > 1)[:20],
                "n_duplicated": sum(n > 1 for n in counts.values()),
                "unasked": sum(t not in self.asked for t in counts)}


async def _fake_child() -> None:
    from _fake_proc import _pipes

    from bots.testing.telegram import FakeTelegramServer

    proto_out = os.dup(1)
    os.dup2(2, 1)  # a stray print must not corrupt the protocol
    reader, writer = await _pipes(proto_out)

    async def reply(body: dict[str, Any]) -> None:
        writer.write(json.dumps(body).encode() + b"\n")
        await writer.drain()

    async with FakeTelegramServer(token=TOKEN, bot_username=BOT_USERNAME) as fake:
        control = SoakFake(fake)
        await reply({"ready": {"base_url": fake.base_url, "base_file_url": fake.base_file_url},
                     "pid": os.getpid()})
        while line := await reader.readline():
            req = json.loads(line)
            await reply(await control.handle(req))
            if req.get("op") == "quit":
                break


# -- GEODE and the samples --------------------------------------------------------------------


def soak_config(fake: dict[str, Any], chats: list[int], lanes: int) -> str:
    """An operator's config.toml for this load."""
    bindings = "".join(f'\n[[bindings]]\nplatform = "telegram"\nchannel = "{c}"\n'
                       f'allow_users = ["{USER}"]\n' for c in chats)
    return (f'[model]\ndefault = "openai:bench-model"\n\n'
            f"[lanes]\nglobal_cap = {lanes}\nchannel_cap = {lanes}\n\n"
            f'[channels.telegram]\nbase_url = "{fake["base_url"]}"\n'
            f'base_file_url = "{fake["base_file_url"]}"\n'
            f"max_concurrent_threads = {max(lanes, 64)}\n"
            f"rate_overall_per_s = 0\nrate_group_per_min = 0\n{bindings}")


@dataclass
class Sample:
    turns: int
    elapsed_s: float
    turns_per_s: float
    p50_ms: float
    fds: int
    #: of fds, sockets (connection pools to the fakes: they open and close with the load)
    sockets: int
    rss_mb: float
    threads: int
    cpu_s: float
    db_mb: float
    wal_mb: float


def _size_mb(path: Path) -> float:
    try:
        return path.stat().st_size / 2**20
    except FileNotFoundError:
        return 0.0


def sample(pid: int, home: Path, *, turns: int, elapsed: float, rate: float,
           p50_ms: float) -> Sample:
    threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:  # closed in between
            pass
    return Sample(turns=turns, elapsed_s=round(elapsed, 1), turns_per_s=round(rate, 1),
                  p50_ms=round(p50_ms, 1), fds=fds, sockets=sockets,
                  rss_mb=round(status_mb(pid, "VmRSS"), 1), threads=threads,
                  cpu_s=round(cpu_s(pid), 1), db_mb=round(_size_mb(home / "geode.db"), 2),
                  wal_mb=round(_size_mb(home / "geode.db-wal"), 2))


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two distinct x)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var


def analyse(samples: list[Sample], *, warmup: float, fd_margin: int,
            rss_slope_mb: float) -> dict[str, Any]:
    """Growth after warm-up, per resource, and whether fds and RSS are flat.

    Sockets come and go with the load (keep-alive pools), so they are compared as the peak
    of the second half after warm-up against the peak of the first half: a leak of one
    socket per N turns raises the later peak, a pool's coming and going does not (within
    the margin, or 5% of the peak for a pool of hundreds). Files (fds that are no socket)
    must not grow beyond the margin."""
    total = samples[-1].turns
    after = [s for s in samples if s.turns >= warmup * total] or samples[-1:]
    half = len(after) // 2
    first, second = after[:max(half, 1)], after[half:] or after
    quarter = [s for s in samples if s.turns >= 0.75 * total] or samples[-1:]
    base = after[0]
    fd_growth = max(s.fds for s in second) - max(s.fds for s in first)
    socket_peak = max(s.sockets for s in first)
    socket_growth = max(s.sockets for s in second) - socket_peak
    file_growth = (max(s.fds - s.sockets for s in second)
                   - max(s.fds - s.sockets for s in first))
    rss_slope = 1000 * _slope([(s.turns, s.rss_mb) for s in quarter])

    def kb_per_turn(part: list[Sample]) -> float:
        span = part[-1].turns - part[0].turns
        return (1024 * (part[-1].db_mb - part[0].db_mb) / span) if span > 0 else 0.0

    return {
        "warmup_turns": base.turns,
        "fd_peak_growth": fd_growth,
        "file_fd_growth": file_growth,
        "rss_growth_after_warmup_mb": round(after[-1].rss_mb - base.rss_mb, 1),
        "rss_slope_last_quarter_mb_per_1000": round(rss_slope, 2),
        "db_kb_per_turn_first_half": round(kb_per_turn(first), 2),
        "db_kb_per_turn_last_quarter": round(kb_per_turn(quarter), 2),
        "wal_max_mb": max(s.wal_mb for s in samples),
        "socket_peak_growth": socket_growth,
        "fds_flat": (file_growth <= fd_margin
                     and socket_growth <= max(fd_margin, 0.05 * socket_peak)),
        "rss_flat": rss_slope <= rss_slope_mb,
    }


def analyse_probes(samples: list[Sample], probes: list[dict[str, Any]], *, warmup: float,
                   slope_mb: float) -> dict[str, Any]:
    """Where the RSS after warm-up went, from the probe inside serve (``--probe``): bytes
    *live* after a full collection (Python's blocks in use + glibc's heap in use, SQLite's
    allocations among them) against bytes the allocators *keep* (Python's arenas beyond
    their blocks in use + glibc's free heap). A leak, or any cache or map growing with the
    turns, grows the live bytes; memory an allocator keeps after a peak (fragmentation, a
    high-water mark) grows only the kept bytes. ``live_flat``: the live bytes' slope over
    the last quarter stays under ``slope_mb`` per 1,000 turns."""
    total = samples[-1].turns
    rows = list(zip(samples, probes, strict=False))
    after = [r for r in rows if r[0].turns >= warmup * total] or rows[-1:]
    quarter = [r for r in rows if r[0].turns >= 0.75 * total] or rows[-1:]

    def live(q: dict[str, Any]) -> float:
        return float(q["pymalloc_used"] + q["heap_in_use"]) / 2**20

    def kept(q: dict[str, Any]) -> float:
        return float(q["pymalloc_arenas"] - q["pymalloc_used"] + q["heap_free"]) / 2**20

    def growth(f: Callable[[dict[str, Any]], float]) -> float:
        return round(f(after[-1][1]) - f(after[0][1]), 2)

    live_slope = 1000 * _slope([(s.turns, live(q)) for s, q in quarter])
    return {
        "live_mb": round(live(after[-1][1]), 1),
        "live_growth_mb": growth(live),
        "live_slope_last_quarter_mb_per_1000": round(live_slope, 2),
        "sqlite_growth_mb": growth(lambda q: float(q["sqlite_used"]) / 2**20),
        "kept_growth_mb": growth(kept),
        "arena_growth_mb": growth(lambda q: float(q["pymalloc_arenas"]) / 2**20),
        "heap_free_growth_mb": growth(lambda q: float(q["heap_free"]) / 2**20),
        "compiled_cache_entries": probes[-1]["compiled_cache"],
        "live_flat": live_slope <= slope_mb,
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n_chats = min(args.chats, args.threads)
    topics = max(1, args.threads // n_chats)
    per_thread_total = max(1, args.turns // (n_chats * topics))
    segments = max(1, min(args.samples, per_thread_total))
    per_segment = [per_thread_total // segments + (i < per_thread_total % segments)
                   for i in range(segments)]
    chats = [-1002000 - i for i in range(n_chats)]
    model_argv = (sys.executable, str(HERE / "_model_proc.py"),
                  "--latency", str(args.model_latency))
    fake_argv = (sys.executable, str(SELF), "--fake-child")
    home = Path(tempfile.mkdtemp(prefix="geode-soak-"))
    samples: list[Sample] = []
    probes: list[dict[str, Any]] = []
    try:
        async with _child(*model_argv) as model, _child(*fake_argv) as fake:
            tg = fake.ready["ready"]
            threads = (await fake.call("setup", chats=chats, topics=topics))["threads"]
            (home / "config.toml").write_text(soak_config(tg, chats, args.lanes))
            port = _free_port()
            env = _env(GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(port),
                       OPENAI_BASE_URL=model.ready["ready"]["base_url"],
                       OPENAI_API_KEY="bench", TELEGRAM_BOT_TOKEN=TOKEN)
            log_path = home / "serve.log"
            with log_path.open("ab") as log:
                async with _child(*_serve_argv(args), env=env,
                                  json_ready=False, stderr=log) as serve:
                    await _until_ready(port, serve.proc)
                    samples.append(sample(serve.pid, home, turns=0, elapsed=0, rate=0,
                                          p50_ms=float("nan")))
                    await _probe(args, serve.pid, probes)
                    lost, done, t_start = await _segments(
                        args, fake, serve, home, threads, per_segment, samples, probes)
                    audit = await fake.call("audit")
                    await fake.call("quit")
            log_text = log_path.read_text(errors="replace")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    analysis = analyse(samples, warmup=args.warmup, fd_margin=args.fd_margin,
                       rss_slope_mb=args.rss_slope_mb)
    if probes:
        analysis["memory"] = analyse_probes(samples, probes, warmup=args.warmup,
                                            slope_mb=args.rss_slope_mb)
    return {
        "params": {"turns": done + lost, "threads": len(threads), "chats": n_chats,
                   "new_every": args.new_every,
                   "lanes": args.lanes, "model_latency": args.model_latency,
                   "python": sys.version.split()[0], "cpus": os.cpu_count()},
        "samples": [asdict(s) for s in samples],
        "probes": probes,
        "analysis": analysis,
        "audit": {**audit, "segment_lost": lost, "answered": done,
                  "elapsed_s": round(time.perf_counter() - t_start, 1),
                  "turn_done_lines": len(re.findall(r"\bturn\.done\b", log_text)),
                  "errors_in_log": len(re.findall(r"\[error", log_text))},
    }


def _serve_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """``geode serve``, or serve under ``_profiled_serve.py``'s memory probe (and memray)."""
    if args.probe is None:
        return (sys.executable, "-m", "geode", "serve")
    args.probe.mkdir(parents=True, exist_ok=True)
    (args.probe / "probe.jsonl").unlink(missing_ok=True)
    memray = ("--memray", str(args.probe / "serve.memray")) if args.memray else ()
    return (sys.executable, str(HERE / "_profiled_serve.py"),
            "--probe", str(args.probe / "probe.jsonl"), *memray)


async def _probe(args: argparse.Namespace, pid: int, probes: list[dict[str, Any]]) -> None:
    """One line of the probe inside serve (SIGPWR), appended to ``probes``."""
    if args.probe is None:
        return
    path = args.probe / "probe.jsonl"
    os.kill(pid, signal.SIGPWR)
    for _ in range(600):
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) > len(probes) and lines[-1].endswith("}"):
            probes.append(json.loads(lines[-1]))
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("serve's memory probe did not answer")


async def _segments(args: argparse.Namespace, fake: Child, serve: Child, home: Path,
                    threads: list[list[int]], per_segment: list[int],
                    samples: list[Sample], probes: list[dict[str, Any]]
                    ) -> tuple[int, int, float]:
    lost = done = 0
    total = sum(per_segment) * len(threads)
    tracking = False
    t_start = time.perf_counter()
    for i, per_thread in enumerate(per_segment):
        t0 = time.perf_counter()
        result = await fake.call("segment", threads=threads, per_thread=per_thread,
                                 prefix=f"q{i + 1}", within=args.within,
                                 new_every=args.new_every)
        lost += result["lost"]
        done += len(result["latencies"])
        rate = len(result["latencies"]) / max(time.perf_counter() - t0, 1e-9)
        p50 = 1000 * _pct(result["latencies"], 0.5)
        samples.append(sample(serve.pid, home, turns=done, elapsed=time.perf_counter() - t_start,
                              rate=rate, p50_ms=p50))
        await _probe(args, serve.pid, probes)
        if args.memray and not tracking and done >= args.warmup * total:
            os.kill(serve.pid, signal.SIGUSR1)  # memray from here: what stays alive after
            tracking = True
        if not args.quiet:
            print(f"  segment {i + 1}/{len(per_segment)}: {done} turns, {rate:.1f}/s, "
                  f"fds {samples[-1].fds}, rss {samples[-1].rss_mb} MB", file=sys.stderr,
                  flush=True)
    if tracking:
        os.kill(serve.pid, signal.SIGUSR2)
        await asyncio.sleep(5)  # the tracker writes its file
    return lost, done, t_start


def print_report(report: dict[str, Any]) -> None:
    p, a, audit = report["params"], report["analysis"], report["audit"]
    print(f"soak: {p['turns']} turns across {p['threads']} threads ({p['chats']} chats), "
          f"lanes {p['lanes']}, model latency {p['model_latency']} s, python {p['python']}, "
          f"{p['cpus']} CPUs"
          + (f", /new every {p['new_every']} turns" if p.get("new_every") else ""))
    head = (f"{'turns':>6} {'elapsed s':>9} {'turns/s':>7} {'p50 ms':>7} {'fds':>4} {'sock':>4} "
            f"{'rss MB':>7} {'thr':>4} {'cpu s':>7} {'db MB':>7} {'wal MB':>7}")
    print(head)
    print("-" * len(head))
    for s in report["samples"]:
        print(f"{s['turns']:>6} {s['elapsed_s']:>9.1f} {s['turns_per_s']:>7.1f} "
              f"{s['p50_ms']:>7.1f} {s['fds']:>4} {s['sockets']:>4} {s['rss_mb']:>7.1f} "
              f"{s['threads']:>4} "
              f"{s['cpu_s']:>7.1f} {s['db_mb']:>7.2f} {s['wal_mb']:>7.2f}")
    if report.get("probes"):
        _print_probes(report)
    print(f"after warm-up ({a['warmup_turns']} turns): socket peak "
          f"{a['socket_peak_growth']:+d} (second half against first), non-socket fds "
          f"{a['file_fd_growth']:+d} -> "
          f"{'flat' if a['fds_flat'] else 'GROWING'}; RSS "
          f"{a['rss_growth_after_warmup_mb']:+.1f} MB (last quarter "
          f"{a['rss_slope_last_quarter_mb_per_1000']:+.2f} MB per 1000 turns) -> "
          f"{'flat' if a['rss_flat'] else 'GROWING'}")
    if "memory" in a:
        m = a["memory"]
        print(f"probe: live after a full collection {m['live_mb']:.1f} MB, "
              f"{m['live_growth_mb']:+.2f} MB after warm-up (last quarter "
              f"{m['live_slope_last_quarter_mb_per_1000']:+.2f} MB per 1000 turns; SQLite "
              f"{m['sqlite_growth_mb']:+.2f}); kept by the allocators "
              f"{m['kept_growth_mb']:+.2f} MB "
              f"(Python's arenas {m['arena_growth_mb']:+.2f}, glibc's free heap "
              f"{m['heap_free_growth_mb']:+.2f}); SQLAlchemy compiled cache "
              f"{'/'.join(map(str, m['compiled_cache_entries']))} entries -> live "
              f"{'flat' if m['live_flat'] else 'GROWING'}")
    print(f"store: db {a['db_kb_per_turn_first_half']:.2f} KB/turn after warm-up, "
          f"{a['db_kb_per_turn_last_quarter']:.2f} KB/turn in the last quarter (the records "
          f"themselves); WAL at most {a['wal_max_mb']:.2f} MB")
    print(f"audit: {audit['asked']} asked, {audit['n_lost']} lost, {audit['n_duplicated']} "
          f"duplicated, {audit['unasked']} answers to nothing asked; {audit['turn_done_lines']} "
          f"turn.done lines, {audit['errors_in_log']} error lines in serve's log")


def _print_probes(report: dict[str, Any]) -> None:
    """The probe inside serve at each sample: where RSS is (glibc's heap in use and free,
    SQLite's allocator, Python's live blocks and gc objects, SQLAlchemy's compiled cache)."""
    head = (f"{'turns':>6} {'rss MB':>7} {'heap MB':>7} {'free MB':>7} {'sqlite MB':>9} "
            f"{'pyarena MB':>10} {'pyused MB':>9} {'gc obj k':>8} {'sa cache':>8}")
    print(head)
    print("-" * len(head))
    for s, q in zip(report["samples"], report["probes"], strict=False):
        print(f"{s['turns']:>6} {q['rss'] / 2**20:>7.1f} {q['heap_in_use'] / 2**20:>7.1f} "
              f"{q['heap_free'] / 2**20:>7.1f} {q['sqlite_used'] / 2**20:>9.2f} "
              f"{q['pymalloc_arenas'] / 2**20:>10.1f} {q['pymalloc_used'] / 2**20:>9.1f} "
              f"{q['gc_objects'] / 1000:>8.1f} "
              f"{'/'.join(map(str, q['compiled_cache'])):>8}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--turns", type=int, default=10_000)
    p.add_argument("--threads", type=int, default=200)
    p.add_argument("--chats", type=int, default=20, help="group chats the threads are in")
    p.add_argument("--samples", type=int, default=20, help="segments, a sample after each")
    p.add_argument("--lanes", type=int, default=64)
    p.add_argument("--model-latency", type=float, default=0.0)
    p.add_argument("--within", type=float, default=120.0,
                   help="s a turn may take before it counts as lost")
    p.add_argument("--warmup", type=float, default=0.25, help="share of the turns")
    p.add_argument("--fd-margin", type=int, default=3)
    p.add_argument("--rss-slope-mb", type=float, default=2.0,
                   help="MB per 1000 turns still called flat")
    p.add_argument("--new-every", type=int, default=0, metavar="N",
                   help="each thread sends /new every N turns: its history stays under N "
                        "exchanges (0: never; the history grows with every turn)")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--probe", type=Path, default=None, metavar="DIR",
                   help="run serve under benchmarks/_profiled_serve.py's memory probe (glibc "
                        "heap, SQLite's allocator, Python blocks, SQLAlchemy's compiled "
                        "cache) sampled with the curve; its lines go to DIR/probe.jsonl")
    p.add_argument("--memray", action="store_true",
                   help="with --probe: memray (native stacks) from the warm-up sample to the "
                        "last; DIR/serve.memray holds what was allocated since and is still "
                        "alive (memray flamegraph --leaks / memray stats; pip install memray)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--fake-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main() -> None:
    args = parse()
    if args.fake_child:
        from geode.logging import configure_logging

        configure_logging(level="ERROR")
        asyncio.run(_fake_child())
        return
    report = asyncio.run(run(args))
    print_report(report)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
