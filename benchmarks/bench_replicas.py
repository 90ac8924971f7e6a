"""Two ``geode serve`` replicas on one PostgreSQL against one: throughput and kill -9 recovery.

    python benchmarks/bench_replicas.py [--clients 16] [--seconds 30] [--lanes 4]
                                        [--latency 2.0] [--lease-ttl 5]

Everything runs as separate processes, as an operator's deployment does: a private
PostgreSQL cluster (``/usr/lib/postgresql/*/bin``, started for the run and removed after),
the Telegram fake and a model in one process of their own (``tests/scenarios/
_chaos_fakes.py``: every turn is an ``edit_file`` call, then the answer; each model call
takes ``--latency`` s), and the replicas (``python -m geode serve``, each with its own
home and ``[lanes] channel_cap = --lanes``).

1. **One replica**, closed loop: ``--clients`` users in one group, each sends a mention (a new
   thread), waits for the answer, sends the next, for ``--seconds``; replies/s.
2. **Two replicas**, the same load: replies/s and the ratio to one (target 1.8 times or more). The
   replica whose intake records the messages claims only what its lanes can start soon
   (``queue_allowance``); the other claims the rest.
3. **kill -9 of each replica** under that load (then started again): seconds from the
   kill until no thread lease is the dead replica's any more, i.e. the survivor took its
   threads over and resumed their turns from their checkpoints (target ≤ ``lease_ttl_s``
   + 5 s), and until every turn it was running then is answered.

Prints a Markdown table. Needs the PostgreSQL server binaries; nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.scenarios._private_pg import PrivatePostgres, pg_bin  # noqa: E402
from tests.scenarios._serve_proc import kill_9, start_serve, stop  # noqa: E402
from tests.scenarios.test_pg_chaos import (  # noqa: E402
    CHAT,
    USER,
    Fakes,
    fakes_process,
    replica_home,
    until_ready,
)


def _pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


class Replica:
    def __init__(self, root: Path, name: str, fakes: Fakes, url: str, workspace: Path,
                 lanes: int, lease_ttl: float) -> None:
        self.name = name
        self.home, self.env = replica_home(root, name, fakes=fakes, store_url=url,
                                           workspace=workspace, lanes=lanes)
        cfg = self.home / "config.toml"
        cfg.write_text(cfg.read_text().replace("lease_ttl_s = 3.0",
                                               f"lease_ttl_s = {lease_ttl}"))
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await start_serve(self.home, self.env)
        await until_ready(self.env, self.proc, within=90)

    async def kill(self) -> None:
        assert self.proc is not None
        await kill_9(self.proc)

    async def stop(self) -> None:
        if self.proc is not None:
            await stop(self.proc)


class Load:
    """The closed loop in the fakes' process; tags never repeat across phases."""

    def __init__(self, fakes: Fakes, clients: int) -> None:
        self.fakes = fakes
        self.clients = clients
        self.first_tag = 1000

    async def start(self) -> None:
        await self.fakes.call("load_start", chat=CHAT, user=USER, clients=self.clients,
                              first_tag=self.first_tag)
        self.first_tag += 100_000

    async def stop(self) -> dict[str, Any]:
        return await self.fakes.call("load_stop")

    async def measure(self, seconds: float, warmup: float = 3.0) -> dict[str, Any]:
        """replies/s over ``seconds`` after ``warmup`` (turns already in flight when the
        window opens are counted when they end in it)."""
        await self.start()
        await asyncio.sleep(warmup)
        before = (await self.fakes.call("load_pending"))["pending"]
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        stats = await self.stop()
        stats["window_s"] = time.monotonic() - t0
        stats["in_flight_at_start"] = len(before)
        return stats


_HELD = """SELECT e.id FROM channel_events e JOIN channel_thread_leases l
  ON l.platform = e.platform AND l.workspace = e.workspace AND l.channel = e.channel
 AND l.thread_root = e.thread_root
 WHERE l.owner LIKE %(owner)s AND e.status IN ('processing', 'running')"""
_LEFT = "SELECT count(*) FROM channel_thread_leases WHERE owner LIKE %(owner)s"
_OPEN = "SELECT count(*) FROM channel_events WHERE id = ANY(%(ids)s) AND status <> 'done'"


async def _kill_and_time(victim: Replica, load: Load, pg: PrivatePostgres, within: float
                         ) -> tuple[float, float, int]:
    """kill -9 ``victim`` under ``load``: (seconds until no thread lease is the victim's any
    more: taken over, its turns resumed; seconds until every turn it was running is
    answered; how many it was running)."""
    import psycopg

    assert victim.proc is not None
    owner = {"owner": f"%:{victim.proc.pid}:%"}
    libpq = pg.url.replace("postgresql+psycopg://", "postgresql://")
    await load.start()
    await asyncio.sleep(6.0)
    with psycopg.connect(libpq, autocommit=True) as conn:
        ids = [int(r[0]) for r in conn.execute(_HELD, owner).fetchall()]
        await victim.kill()
        killed = time.monotonic()
        taken = answered = float("inf")
        def count(query: str, params: dict[str, Any]) -> int:
            return int((conn.execute(query, params).fetchone() or (1,))[0])

        while time.monotonic() < killed + within:
            now = time.monotonic() - killed
            if taken == float("inf") and count(_LEFT, owner) == 0:
                taken = now
            if answered == float("inf") and count(_OPEN, {"ids": ids}) == 0:
                answered = now
            if taken < float("inf") and answered < float("inf"):
                break
            await asyncio.sleep(0.1)
    await load.stop()
    return taken, answered, len(ids)


@contextlib.asynccontextmanager
async def _cluster() -> AsyncIterator[PrivatePostgres]:
    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("bench_replicas: no /usr/lib/postgresql/*/bin (initdb, pg_ctl)")
    pg = PrivatePostgres(bin_dir=bin_dir)
    try:
        await asyncio.to_thread(pg.init)
        yield pg
    finally:
        pg.close()


async def run(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    root = Path(tempfile.mkdtemp(prefix="geode-bench-replicas-"))
    rows: list[tuple[str, str, str]] = []
    try:
        async with _cluster() as pg, fakes_process(args.latency, root / "fakes.log") as fakes:
            ws = root / "ws"
            ws.mkdir()
            (ws / "log.txt").write_text("END\n")
            a = Replica(root, "a", fakes, pg.url, ws, args.lanes, args.lease_ttl)
            b = Replica(root, "b", fakes, pg.url, ws, args.lanes, args.lease_ttl)
            load = Load(fakes, args.clients)
            try:
                await a.start()
                one = await load.measure(args.seconds)
                await b.start()
                await asyncio.sleep(1.0)
                two = await load.measure(args.seconds)
                r1 = one["replies"] / one["window_s"]
                r2 = two["replies"] / two["window_s"]
                for label, st, rate in (("one replica", one, r1), ("two replicas", two, r2)):
                    lat = st["latencies"]
                    rows.append((f"{label}, closed loop ({args.clients} users)",
                                 f"{rate:.2f} replies/s",
                                 f"p50 {_pct(lat, 50):.2f} s, p99 {_pct(lat, 99):.2f} s"))
                rows.append(("two / one", f"{r2 / r1:.2f}×", "target ≥ 1.8×"))
                target = args.lease_ttl + 5
                for victim in (a, b):
                    taken, answered, running = await _kill_and_time(victim, load, pg,
                                                                    within=90)
                    rows.append((f"kill -9 of replica {victim.name} under load: its threads "
                                 "taken over and resumed",
                                 f"{taken:.1f} s", f"target ≤ lease TTL + 5 s = {target:.0f} s"))
                    rows.append((f"… its {running} running turns answered (a resumed turn "
                                 "runs on)", f"{answered:.1f} s", ""))
                    await victim.start()
                    await asyncio.sleep(1.0)
            finally:
                await a.stop()
                await b.stop()
            doubled = [t for t in set((ws / "log.txt").read_text().split())
                       if (ws / "log.txt").read_text().split().count(t) > 1]
            rows.append(("edits applied twice", str(len(doubled)), "must be 0"))
    finally:
        if os.environ.get("GEODE_BENCH_KEEP"):
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--lanes", type=int, default=4, help="each replica's channel_cap")
    parser.add_argument("--latency", type=float, default=2.0, help="s per model call")
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    print(f"\n{args.clients} users, {args.lanes} channel lanes per replica, model "
          f"{args.latency} s a call (2 calls a turn: edit_file, answer), lease TTL "
          f"{args.lease_ttl} s\n")
    print("| measure | result | note |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print(json.dumps({"rows": rows}), file=sys.stderr)


if __name__ == "__main__":
    main()
