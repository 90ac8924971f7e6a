"""`geode memory list / show / rm` (+ ``--json``) on a home's store."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from geode.store import open_store
from geode.store.memory import MemoryAudit, MemoryEntry, MemoryStore


def _geode(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("GEODE_")}
    env.update(GEODE_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-m", "geode", *argv], cwd=home, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def _seed(home: Path) -> list[MemoryEntry]:
    async def main() -> list[MemoryEntry]:
        async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
            memory = MemoryStore(store=store)
            audit = MemoryAudit(by="telegram:42", session_id="telegram:1:-100:7", turn_id="t")
            return [await memory.add(scope=s, owner=o, text=t, audit=audit) for s, o, t in (
                ("user", "telegram:42", "likes tea"), ("user", "telegram:43", "likes coffee"),
                ("channel", "telegram:-100", "standup 09:30"))]

    return asyncio.run(main())


def test_list_show_rm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tea, coffee, standup = _seed(home)

    # in written order; entries written in the same millisecond by their ids
    def written(*entries: MemoryEntry) -> list[str]:
        return [e.id for e in sorted(entries, key=lambda e: (e.created_at, e.id))]

    everything = json.loads(_geode(home, "memory", "list", "--json").stdout)
    assert [e["id"] for e in everything] == written(tea, coffee, standup)
    assert {(e["id"], e["scope"], e["owner"]) for e in everything} == {
        (tea.id, "user", "telegram:42"), (coffee.id, "user", "telegram:43"),
        (standup.id, "channel", "telegram:-100")}
    proc = _geode(home, "memory", "list", "--user", "telegram:43", "--binding",
                  "telegram:-100", "--json")
    assert sorted(e["text"] for e in json.loads(proc.stdout)) == ["likes coffee",
                                                                   "standup 09:30"]
    assert _geode(home, "memory", "list", "--user", "42").returncode == 2  # PLATFORM:ID

    shown = json.loads(_geode(home, "memory", "show", tea.id, "--json").stdout)
    assert shown["text"] == "likes tea" and shown["created_by"] == "telegram:42"
    text = _geode(home, "memory", "show", tea.id).stdout
    assert "owner:   telegram:42" in text and "session: telegram:1:-100:7" in text

    proc = _geode(home, "memory", "rm", tea.id)
    assert proc.returncode == 0 and f"removed {tea.id}" in proc.stdout
    assert _geode(home, "memory", "rm", tea.id).returncode == 1
    assert _geode(home, "memory", "show", tea.id).returncode == 1
    left = json.loads(_geode(home, "memory", "list", "--json").stdout)
    assert [e["id"] for e in left] == written(coffee, standup)

    async def removal() -> list[tuple[str, str]]:
        async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
            rows = await store.timeline.list("telegram:1:-100:7")
        return [(r.kind, r.payload["via"]) for r in rows if r.payload.get("id") == tea.id]

    assert asyncio.run(removal()) == [("memory.added", "tool"), ("memory.removed", "cli")]
