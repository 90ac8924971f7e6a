"""The database's schema: one Alembic migration branch per package that owns tables.

* branch ``geode`` (``geode/store/migrations/versions``): the harness's tables;
* every other branch is registered by its package in the entry point group
  ``geode.store.migrations`` (name: the branch, value: the dotted package holding its
  ``versions/`` folder, e.g. ``bots = "bots.store.migrations"``). Alembic runs them all
  together through ``version_locations``; a branch's first revision may
  ``depends_on`` another branch's revision.

Databases made before the branches (one linear chain ``0001``-``0012`` in geode's folder,
kept frozen under ``migrations/legacy``) are converted once: the legacy chain is run to its
last revision ``0012``, then ``alembic_version`` is restamped with each branch's revision
that declares ``legacy_head = "0012"`` (the revision whose tables ``0012`` already made), and
the branches upgrade from there. Nothing is recreated; it all happens in one transaction.

Opening a database that is current never imports Alembic: the revision ids are read from
the version files (:func:`heads`), and compared with ``alembic_version``.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import importlib.util
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from geode.errors import StoreError, StoreUnavailableError
from geode.store._engines import build_engine, normalize_url, where

__all__ = [
    "ENTRY_POINT_GROUP",
    "LEGACY_HEAD",
    "BranchStatus",
    "branch_heads",
    "check_and_migrate",
    "expected_versions",
    "heads",
    "status",
    "upgrade",
    "version_locations",
]

log = structlog.get_logger("geode.store.database")

_HERE = Path(__file__).resolve().parent
MIGRATIONS = _HERE / "migrations"
#: the frozen linear chain of the releases before the branches (0001-0012)
LEGACY = MIGRATIONS / "legacy"
LEGACY_HEAD = "0012"
GEODE_BRANCH = "geode"
ENTRY_POINT_GROUP = "geode.store.migrations"
# Any 64-bit key: serialises concurrent `upgrade` runs of several replicas on one PG database.
_PG_MIGRATION_LOCK = zlib.crc32(b"geode.store.migrations")


@dataclass(frozen=True, slots=True)
class _Script:
    revision: str
    follows: tuple[str, ...]
    labels: tuple[str, ...]
    depends: tuple[str, ...]
    legacy_head: str | None


@dataclass(frozen=True, slots=True)
class BranchStatus:
    """One branch of a database: where it is (None: not created) and this GEODE's head."""

    branch: str
    current: str | None
    head: str

    @property
    def is_current(self) -> bool:
        return self.current == self.head


def _package_dir(dotted: str) -> Path | None:
    """The folder of package ``dotted`` without importing it (nor its parents: ``bots``'s
    ``__init__`` imports the whole channel layer)."""
    top, *rest = dotted.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)), *rest)


@functools.cache
def version_locations() -> tuple[Path, ...]:
    """The ``versions/`` folder of every branch: geode's first, then the registered ones
    by name."""
    found = [MIGRATIONS / "versions"]
    for name, package in sorted(_registered()):
        folder = _package_dir(package)
        if folder is None or not (folder / "versions").is_dir():
            log.warning("store.migrations_missing", branch=name, package=package)
            continue
        if folder / "versions" not in found:
            found.append(folder / "versions")
    return tuple(found)


def _registered() -> set[tuple[str, str]]:
    """(branch, package) of every ``geode.store.migrations`` entry point, from every
    installed copy of the metadata: ``entry_points()`` keeps the first distribution of a
    name on ``sys.path``, and a stale ``*.egg-info`` in a source checkout would hide the
    installed one's branches."""
    from geode.hooks.registry import entry_points

    return {(ep.name, ep.value) for ep in entry_points(ENTRY_POINT_GROUP, every_copy=True)}


def _read(folders: tuple[Path, ...]) -> dict[str, _Script]:
    """Each migration's revision id, the ids it follows, its branch labels and the legacy
    revision it stands for, read from the files without Alembic (the files cannot change
    while we run)."""
    out: dict[str, _Script] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            values: dict[str, Any] = {}
            for node in _header(path.read_text(encoding="utf-8")).body:
                target: ast.expr
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    target, value = node.target, node.value
                elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                else:
                    continue
                if isinstance(target, ast.Name) and target.id in (
                        "revision", "down_revision", "branch_labels", "depends_on",
                        "legacy_head"):
                    values[target.id] = ast.literal_eval(value)
            rev = values.get("revision")
            if not isinstance(rev, str):
                continue  # not a migration script
            out[rev] = _Script(revision=rev, follows=_names(values.get("down_revision")),
                               labels=_names(values.get("branch_labels")),
                               depends=_names(values.get("depends_on")),
                               legacy_head=values.get("legacy_head"))
    return out


def _header(source: str) -> ast.Module:
    """The module up to its first function: where a migration's ids are assigned (parsing
    only that keeps opening a store cheap; the whole file if the cut is not valid)."""
    try:
        return ast.parse(source.split("\ndef ", 1)[0])
    except SyntaxError:
        return ast.parse(source)


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


@functools.cache
def _scripts() -> dict[str, _Script]:
    return _read(version_locations())


@functools.cache
def _legacy() -> dict[str, _Script]:
    return _read((LEGACY / "versions",))


def heads() -> tuple[str, ...]:
    """The newest revision of every branch this GEODE ships (sorted)."""
    scripts = _scripts()
    followed = {d for s in scripts.values() for d in s.follows}
    return tuple(sorted(r for r in scripts if r not in followed))


def _ancestors(rev: str, scripts: dict[str, _Script]) -> set[str]:
    """Every revision ``rev`` needs applied first (down revisions and ``depends_on``)."""
    seen: set[str] = set()
    todo = [*scripts[rev].follows, *scripts[rev].depends]
    while todo:
        r = todo.pop()
        if r not in seen and r in scripts:
            seen.add(r)
            todo.extend((*scripts[r].follows, *scripts[r].depends))
    return seen


def _recorded(revs: set[str] | tuple[str, ...]) -> set[str]:
    """The rows ``alembic_version`` holds once ``revs`` are applied: Alembic keeps one row
    per revision that no other applied one depends on (a branch whose head another
    branch ``depends_on`` is recorded through that one)."""
    scripts = _scripts()
    covered = {a for r in revs for a in _ancestors(r, scripts)}
    return {r for r in revs if r not in covered}


def expected_versions() -> set[str]:
    """What ``alembic_version`` holds in a database at every branch's head."""
    return _recorded(heads())


def _branch_of(rev: str) -> str:
    """The branch label of ``rev`` (the label its base revision declares)."""
    scripts = _scripts()
    while True:
        script = scripts[rev]
        if script.labels:
            return script.labels[0]
        if not script.follows:
            return rev
        rev = script.follows[0]


def branch_heads() -> dict[str, str]:
    """Branch name -> this GEODE's head of it."""
    return {_branch_of(h): h for h in heads()}


def _inspect_state(conn: Connection) -> tuple[set[str], set[str]]:
    tables = set(inspect(conn).get_table_names())
    versions: set[str] = set()
    if "alembic_version" in tables:
        versions = {r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")}
    return tables, versions


def _alembic_config(connection: Connection, *, legacy: bool = False) -> Any:
    from alembic.config import Config

    cfg = Config(str(_HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS))
    folders = (LEGACY / "versions",) if legacy else version_locations()
    cfg.set_main_option("version_locations", os.pathsep.join(str(f) for f in folders))
    cfg.attributes["connection"] = connection
    return cfg


def _convert_legacy(conn: Connection, version: str) -> None:
    """A database of the linear-chain releases: finish that chain (to ``0012``), then stamp
    each branch's revision that stands for it. Tables are kept as they are."""
    from alembic import command

    if version != LEGACY_HEAD:
        command.upgrade(_alembic_config(conn, legacy=True), LEGACY_HEAD)
    stamps = sorted(_recorded(
        {s.revision for s in _scripts().values() if s.legacy_head == LEGACY_HEAD}))
    conn.exec_driver_sql("DELETE FROM alembic_version")
    for rev in stamps:
        conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": rev})
    log.info("store.legacy_converted", from_revision=version, stamped=stamps)


def _run_upgrade(conn: Connection) -> None:
    from alembic import command

    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
    # Read again under the lock: another replica may have migrated meanwhile.
    _, versions = _inspect_state(conn)
    if versions and versions <= set(_legacy()):
        _convert_legacy(conn, next(iter(versions)))
    command.upgrade(_alembic_config(conn), "heads")


async def _state(engine: AsyncEngine, url: URL) -> tuple[set[str], set[str]]:
    place = where(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_inspect_state)
    except DBAPIError as exc:
        if url.get_backend_name() == "sqlite":
            raise StoreError(
                f"the store file {place} is not a usable GEODE database "
                f"({_first_line(exc.orig)}). {_ADVICE}"
            ) from exc
        raise StoreUnavailableError(
            f"cannot reach the PostgreSQL store at {place} ({type(exc.orig).__name__}); "
            "check that the server runs and the [store] url"
        ) from exc
    except OSError as exc:
        raise StoreError(f"cannot open the store at {place}: {exc.strerror or exc}") from exc


_ADVICE = ("Run `geode db upgrade`, or restore the file from a backup (or move it away to "
           "start a new store).")


async def check_and_migrate(engine: AsyncEngine, url: URL, *, migrate: bool) -> None:
    """Bring the schema to every branch's head (``migrate``) or check it is there.

    Raises:
        StoreError: foreign tables, a revision this GEODE does not know (a newer GEODE
            wrote it), a schema that is behind when ``migrate=False``, or a failed migration.
        StoreUnavailableError: the PostgreSQL server cannot be reached.
    """
    place = where(url)
    tables, versions = await _state(engine, url)
    wanted = expected_versions()
    if tables and not versions:
        raise StoreError(
            f"the database at {place} holds tables that are not GEODE's "
            f"({', '.join(sorted(tables)[:5])}) and no migration version. Point [store] url "
            f"at another database, or restore a GEODE backup there. {_ADVICE}"
        )
    unknown = sorted(v for v in versions if v not in _scripts() and v not in _legacy())
    if unknown:
        raise StoreError(
            f"the database at {place} is at schema revision {', '.join(unknown)!r}, unknown "
            f"to this GEODE (a newer version wrote it?). Upgrade GEODE or restore a backup."
        )
    if versions == wanted:
        return
    if not migrate:
        raise StoreError(
            f"the store at {place} is at schema revision "
            f"{', '.join(sorted(versions)) or 'none'}, this GEODE needs "
            f"{', '.join(sorted(wanted))}. Run `geode db upgrade` (back the database up first)."
        )
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(geode_write=True)
            async with conn.begin():
                await conn.run_sync(_run_upgrade)
    except DBAPIError as exc:
        raise StoreError(
            f"migrating the store at {place} failed ({_first_line(exc.orig)}). {_ADVICE}"
        ) from exc
    log.info("store.migrated", where=place, from_revision=",".join(sorted(versions)) or None,
             to_revision=",".join(sorted(wanted)))


async def upgrade(url: str) -> tuple[str, ...]:
    """Apply every pending migration of every branch (``geode db upgrade``). Returns the
    heads (:func:`heads`)."""
    parsed = normalize_url(url)
    engine = build_engine(parsed)
    try:
        await check_and_migrate(engine, parsed, migrate=True)
    finally:
        await engine.dispose()
    return heads()


async def status(url: str) -> list[BranchStatus]:
    """Where each branch of the database at ``url`` is, against this GEODE's heads
    (``geode db status``). A database of the linear-chain releases shows as the legacy
    revision on every branch it covers."""
    parsed = normalize_url(url)
    versions: set[str] = set()
    # A SQLite file that does not exist stays so: building the engine would create it.
    if parsed.get_backend_name() != "sqlite" or await asyncio.to_thread(
            Path(str(parsed.database)).exists):
        engine = build_engine(parsed)
        try:
            _, versions = await _state(engine, parsed)
        finally:
            await engine.dispose()
    scripts = _scripts()
    applied = {v for v in versions if v in scripts}
    applied |= {a for v in applied for a in _ancestors(v, scripts)}
    legacy = sorted(v for v in versions if v in _legacy())
    out = []
    for branch, head in sorted(branch_heads().items()):
        mine = {r for r in applied if _branch_of(r) == branch}
        newer = {a for r in mine for a in _ancestors(r, scripts)}
        current = next(iter(sorted(mine - newer)), None)
        if current is None and legacy and any(
                s.legacy_head and _branch_of(r) == branch for r, s in scripts.items()):
            current = f"legacy {legacy[0]}"
        out.append(BranchStatus(branch=branch, current=current, head=head))
    return out


def _first_line(exc: BaseException | None) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
