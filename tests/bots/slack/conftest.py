"""Fixtures of the Slack tests: the wire-level fake with the bound channel, and the list of
the stacks a test made (each stopped at its end, before the fake closes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_helpers import CH, SlackStack

from bots.testing.slack import FakeSlack


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CH)
        yield srv


@pytest.fixture
async def stacks(home: Path, fake: FakeSlack) -> AsyncIterator[list[SlackStack]]:
    made: list[SlackStack] = []
    yield made
    for s in made:
        await s.stop()
