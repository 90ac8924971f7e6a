"""Fixtures for the executor tests (helpers live in exec_helpers.py)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from exec_helpers import HarnessFactory, make_harness


@pytest.fixture
def harness(tmp_path: Path) -> HarnessFactory:
    return partial(make_harness, tmp_path)
