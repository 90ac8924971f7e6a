"""Helpers for the MCP tests: the fixture server's config and its call log."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from geode.mcp.config import ServerConfig, ServerPolicy

ECHO_SERVER = Path(__file__).parent / "servers" / "echo_server.py"
REPO_ROOT = Path(__file__).resolve().parents[2]


def read_calls(log: Path) -> list[dict[str, Any]]:
    """What the fixture server received, one dict per call (tool, args, pid)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@dataclass
class EchoFiles:
    root: Path
    log: Path
    starts: Path
    env: dict[str, str] = field(default_factory=dict)

    def config(
        self,
        name: str = "echo",
        *,
        policy: ServerPolicy | None = None,
        mode: str = "ok",
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float | None = None,
        timeout_s: float = 30.0,
    ) -> ServerConfig:
        return ServerConfig(
            name=name,
            origin="test",
            command=sys.executable,
            args=(str(ECHO_SERVER), "--mode", mode),
            env={"ECHO_LOG": str(self.log), "ECHO_STARTS": str(self.starts), **self.env,
                 **(env or {})},
            policy=policy,
            startup_timeout_s=startup_timeout_s,
            timeout_s=timeout_s,
        )

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.log)


@pytest.fixture
def echo_files(tmp_path: Path) -> EchoFiles:
    return EchoFiles(root=tmp_path, log=tmp_path / "calls.jsonl", starts=tmp_path / "starts.txt")


class FakeSecrets:
    """The ``Secrets.get`` interface over a dict."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)

    def get(self, name: str) -> str | None:
        return self.values.get(name)
