"""Recorded sessions (``tests/replay/_sessions.py``), recorded once per module."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from geode.replay import Recording, load_recording
from geode.settings import load_settings
from geode.store import open_store
from tests.replay._sessions import record, scenarios

SESSIONS = 20


@dataclass(frozen=True)
class Recorded:
    home: Path
    ids: list[str]
    recordings: list[Recording]


async def _load(home: Path, ids: list[str]) -> list[Recording]:
    settings, _ = load_settings(cwd=home, env={"GEODE_HOME": str(home)})
    store = await open_store(settings.store_url)
    try:
        return [await load_recording(store, sid) for sid in ids]
    finally:
        await store.aclose()


def _recorded(count: int) -> Iterator[Recorded]:
    home = Path(tempfile.mkdtemp(prefix="gd-", dir="/tmp"))
    try:
        ids = asyncio.run(record(home, count))
        yield Recorded(home=home, ids=ids, recordings=asyncio.run(_load(home, ids)))
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def recorded() -> Iterator[Recorded]:
    """Twenty sessions: the scenarios in turn."""
    yield from _recorded(SESSIONS)


@pytest.fixture(scope="module")
def one_of_each() -> Iterator[Recorded]:
    """One session of each scenario."""
    yield from _recorded(len(scenarios()))
