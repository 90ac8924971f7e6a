"""A store that does not answer at start is exit 75 (EX_TEMPFAIL), not 2: a supervisor restarts
on it (deploy/geode.service keeps only 2 in RestartPreventExitStatus)."""

from __future__ import annotations

from pathlib import Path

from geode.cli.app import EXIT_STORE_UNAVAILABLE
from tests.daemon.conftest import free_port, geode


def test_serve_exits_75_when_the_postgresql_store_does_not_answer(home: Path) -> None:
    closed = free_port()  # nothing listens there
    done = geode(home, "serve", "--demo", timeout=60,
                 GEODE_STORE__URL=f"postgresql+psycopg://geode@127.0.0.1:{closed}/geode")
    assert done.returncode == EXIT_STORE_UNAVAILABLE == 75, done.stderr
    assert "cannot reach the PostgreSQL store" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_store_file_is_still_a_configuration_error(home: Path) -> None:
    (home / "geode.db").write_bytes(b"not a database, not at all" * 100)
    done = geode(home, "serve", "--demo", timeout=60)
    assert done.returncode == 2, done.stderr
