"""Suite-wide guards: no test may reach a non-loopback address; PG is required under CI."""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

# PTB 22 warns on every RetryAfter unless timedelta mode is on; warnings are errors here.
os.environ.setdefault("PTB_TIMEDELTA", "1")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: Any) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths are local by definition
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name we would have to resolve: not in tests
    return ip.is_loopback


def _guarded(real: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
            raise RuntimeError(f"test tried to reach a non-loopback address: {address!r}")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex))
    yield


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    # In-process CLI tests call configure_logging(level=WARNING); its level filter would
    # hide INFO events from later tests' structlog.testing.capture_logs().
    yield
    structlog.reset_defaults()


def _pg_url() -> str | None:
    return os.environ.get("GEODE_TEST_PG_URL")


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The PostgreSQL URL for shared-store tests; never skipped under CI=true."""
    url = _pg_url()
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("GEODE_TEST_PG_URL is not set under CI=true (.ci/run starts PostgreSQL)")
        pytest.skip("GEODE_TEST_PG_URL not set (run `bash .ci/run` or source .ci/pg.sh)")
    return url


@pytest.fixture
def pg_store_url(pg_url: str) -> Iterator[str]:
    """The root ``pg_url`` (skips, or fails under CI=true, when unset) in a fresh schema."""
    import contextlib
    from urllib.parse import quote

    import psycopg
    from sqlalchemy.engine import make_url

    libpq = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with contextlib.suppress(Exception), psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '10s'")  # never hang a run on a leaked session
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
