"""`geode doctor` says whether run_bash's sandbox works here, and if not why and the fix."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from geode.cli import doctor
from geode.tools.builtin import _sandbox


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    _sandbox.reset_probe()
    yield
    _sandbox.reset_probe()


def _fake_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")


async def test_reports_a_working_sandbox(sandbox: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert await doctor._check_sandbox() == 0
    assert "[ok  ] sandbox: bubblewrap works here" in capsys.readouterr().out


async def test_names_systemds_missing_af_netlink_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_bwrap(
        tmp_path,
        monkeypatch,
        "bwrap: loopback: Failed to create NETLINK_ROUTE socket: Address family not supported "
        "by protocol",
    )
    assert await doctor._check_sandbox() == 1
    out = capsys.readouterr().out
    assert "[FAIL] sandbox: run_bash will refuse to run" in out and "NETLINK_ROUTE" in out
    assert "add AF_NETLINK" in out and "RestrictAddressFamilies=" in out


async def test_names_refused_namespaces_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_bwrap(tmp_path, monkeypatch, "bwrap: setting up uid map: Operation not permitted")
    assert await doctor._check_sandbox() == 1
    out = capsys.readouterr().out
    assert "uid map: Operation not permitted" in out
    assert "namespaces" in out.split("→", 1)[1]


async def test_names_a_missing_bubblewrap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert await doctor._check_sandbox() == 1
    out = capsys.readouterr().out
    assert "bwrap is not installed" in out and "apt-get install bubblewrap" in out


def test_an_older_bubblewrap_still_sandboxes_and_doctor_names_what_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bubblewrap < 0.8 (Ubuntu 22.04) has no --size / --disable-userns / --perms
    monkeypatch.setattr(_sandbox, "_supports", functools.cache(lambda bwrap: frozenset()))
    argv = _sandbox.bwrap_argv("/usr/bin/bwrap", tmp_path, ["true"])
    assert "--size" not in argv and "--disable-userns" not in argv and "--perms" not in argv
    assert "--unshare-user" in argv and "--tmpfs" in argv
    lacks = _sandbox.missing_features("/usr/bin/bwrap")
    assert len(lacks) == 2 and "--size" in lacks[0] and "--disable-userns" in lacks[1]
