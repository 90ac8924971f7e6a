"""IPC benchmark: what the daemon's socket adds to a turn, and the CLI's cold start.

Measured, each as a median (p50) and p95 over ``--runs`` samples:

1. ``in-process turn``: open a session through the factory and run one turn with the
   scripted model, in this process (what ``geode run`` does after start-up);
2. ``IPC turn``: the same turn sent to a running ``geode serve`` over ``cli.sock`` by an
   in-process client (connect, run frame, events, result); **added = 2 - 1** (target
   <= 30 ms p50);
3. ``geode ask`` vs ``geode run`` as whole processes, both with the scripted model (the
   user-visible difference; includes interpreter start-up of both);
4. ``geode --help`` cold start (target <= 300 ms; heavy SDKs are imported lazily).

Run: ``python benchmarks/bench_ipc.py --runs 30``. Not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from geode.daemon.ipc import IPCClient
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.logging import configure_logging
from geode.providers.scripted import ScriptedProvider
from geode.settings import load_settings

CLI = [sys.executable, "-c",
       "import sys; from geode.cli import main; "
       "sys.argv[0] = 'geode'; main()"]
SCRIPT = ["benchmark answer"]


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def in_process(home: Path, runs: int) -> list[float]:
    settings, secrets = load_settings(env={"GEODE_HOME": str(home)})
    samples = []
    async with await Runtime.create(settings=settings, secrets=secrets) as runtime:
        for _ in range(runs):
            t0 = time.perf_counter()
            session = await runtime.open_session(SessionContext(
                mode="HEADLESS", workspace=home, provider=ScriptedProvider(list(SCRIPT))))
            result = await session.run("hi")
            samples.append(time.perf_counter() - t0)
            assert result.ok, result.detail
    return samples


async def over_ipc(sock: Path, runs: int) -> list[float]:
    samples = []
    for i in range(runs):
        t0 = time.perf_counter()
        client = await IPCClient.connect(sock)
        await client.send({"type": "run", "id": f"b{i}", "prompt": "hi"})
        while True:
            frame = await client.recv()
            assert frame is not None
            if frame["type"] in ("result", "error"):
                break
        await client.close()
        samples.append(time.perf_counter() - t0)
        assert frame["type"] == "result", frame
    return samples


def processes(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        samples.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr[-2000:]
    return samples


def start_serve(env: dict[str, str], sock: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*CLI, "serve"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("geode serve did not start")
        time.sleep(0.05)
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    configure_logging(level="WARNING")
    with tempfile.TemporaryDirectory(prefix="gb-", dir="/tmp") as tmp:
        home = Path(tmp)
        script = home / "script.json"
        script.write_text(json.dumps(SCRIPT))
        env = {**os.environ, "GEODE_HOME": str(home), "GEODE_SCRIPTED_MODEL": str(script),
               "GEODE_HEALTH_PORT": "0"}
        sock = home / "cli.sock"

        inproc = asyncio.run(in_process(home / "inproc", args.runs))
        serve = start_serve(env, sock)
        try:
            ipc = asyncio.run(over_ipc(sock, args.runs))
            ask = processes([*CLI, "ask", "--json", "hi"], env, max(5, args.runs // 4))
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
        run_env = {**env, "GEODE_HOME": str(home / "run")}
        run = processes([*CLI, "run", "--demo", "--json", "hi"], run_env,
                        max(5, args.runs // 4))
        help_ = processes([*CLI, "--help"], env, 10)

    rows = [("in-process turn (factory + loop)", inproc), ("IPC turn (socket client)", ipc),
            ("`geode run --demo` process", run), ("`geode ask` process", ask),
            ("`geode --help` cold start", help_)]
    print(f"{'measure':36} {'p50 ms':>9} {'p95 ms':>9}")
    for name, samples in rows:
        p50, p95 = _stats(samples)
        print(f"{name:36} {p50:9.1f} {p95:9.1f}")
    added = _stats(ipc)[0] - _stats(inproc)[0]
    ratio = _stats(ipc)[0] / _stats(inproc)[0]
    print(f"\nIPC added p50: {added:.1f} ms (target <= 30 ms); IPC / in-process: {ratio:.2f}x")
    print(f"`geode ask` / `geode run` process p50: {_stats(ask)[0] / _stats(run)[0]:.2f}x")
    print(f"`geode --help` p50: {_stats(help_)[0]:.0f} ms (target <= 300 ms)")


if __name__ == "__main__":
    main()
