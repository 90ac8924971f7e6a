"""Start-up cost of ``geode run --demo "hi"`` and the part of it GEODE cannot remove.

Runs the real console script (``<python> -m geode``, bytecode cached as an installed package
has it) ``--runs`` times on a fresh ``GEODE_HOME`` (one unmeasured run first creates and
migrates the store), and reports the median wall time and CPU (user + system) per run. Then
the floor: a fresh interpreter that only imports the third-party and standard-library modules
the demo ends up with (its ``sys.modules`` minus ``geode``), and an empty interpreter. What
the demo costs above the import floor is GEODE's own modules and the run itself.

``--baseline DIR`` also runs the demo of another checkout (``git worktree add /tmp/base main``
or ``git archive REV | tar -x -C DIR``), alternating with this one run by run, so both see the
same machine load: on a shared machine compare the two medians, not runs taken minutes apart.

Run: ``python benchmarks/bench_startup.py [--runs 10] [--baseline DIR]``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import atexit, json, sys
def _dump():
    with open({out!r}, "w") as f:
        json.dump(sorted(m for m, mod in sys.modules.items() if mod is not None
                         and m.split(".")[0] not in ("geode", "bots", "__main__")), f)
atexit.register(_dump)
sys.argv = ["geode", "run", "--demo", "hi"]
from geode.cli import main
main()
"""

_IMPORT_ALL = """
import importlib, json, sys
for name in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _median(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> tuple[float, float]:
    samples = [_timed(argv, env, cwd) for _ in range(runs)]
    return (statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples))


def _demo_env(repo: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GEODE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["GEODE_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    return env


def _interleaved(argv: list[str], envs: list[dict[str, str]], cwd: Path,
                 runs: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) per environment, their runs alternating."""
    samples: list[list[tuple[float, float]]] = [[] for _ in envs]
    for _ in range(runs):
        for i, env in enumerate(envs):
            samples[i].append(_timed(argv, env, cwd))
    return [(statistics.median(s[0] for s in ss), statistics.median(s[1] for s in ss))
            for ss in samples]


def main(runs: int, baseline: Path | None = None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="geode-startup-"))
    try:
        env = _demo_env(REPO, tmp / "home")
        demo = [sys.executable, "-m", "geode", "run", "--demo", "hi"]
        subprocess.run(demo, env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)  # store created; .pyc written
        compared: list[tuple[str, tuple[float, float]]] = []
        if baseline is not None:
            base_env = _demo_env(baseline.resolve(), tmp / "base-home")
            subprocess.run(demo, env=base_env, cwd=tmp, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=True)
            ours, theirs = _interleaved(demo, [env, base_env], tmp, runs)
            compared = [('geode run --demo "hi" (this checkout)', ours),
                        (f'geode run --demo "hi" ({baseline})', theirs)]
        mods = tmp / "modules.json"
        subprocess.run([sys.executable, "-c", _PROBE.format(out=str(mods))], env=env, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        n_mods = len(json.loads(mods.read_text()))
        rows = compared or [('geode run --demo "hi"', _median(demo, env, tmp, runs))]
        rows += [
            (f"import only its {n_mods} non-GEODE modules",
             _median([sys.executable, "-c", _IMPORT_ALL, str(mods)], env, tmp, runs)),
            ("  of them SQLAlchemy (ORM, asyncio) + aiosqlite",
             _median([sys.executable, "-c", "import sqlalchemy.orm, sqlalchemy.ext.asyncio, "
                      "sqlalchemy.dialects.sqlite.aiosqlite"], env, tmp, runs)),
            ("empty interpreter (python -c pass)",
             _median([sys.executable, "-c", "pass"], env, tmp, runs)),
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, median of {runs} runs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'what':<44} {'wall s':>7} {'CPU s':>7}")
    for what, (wall, cpu) in rows:
        print(f"{what:<44} {wall:>7.3f} {cpu:>7.3f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--baseline", type=Path, default=None,
                   help="another checkout whose demo runs alternate with this one's")
    args = p.parse_args()
    main(args.runs, args.baseline)
