"""``geode trust``: a project's MCP servers run only after the operator trusted that exact section.

A cloned repository must not be able to spawn processes by itself, so the ``[mcp]`` section
of ``DIR/.geode/config.toml`` is ignored until ``geode trust DIR`` records its sha256 in
``$GEODE_HOME/trusted_projects.json``. The hash covers the parsed section (servers *and*
their policies), so any change to a command, argument, env entry or policy needs trust
again; comments and formatting do not.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from geode.errors import ConfigError
from geode.mcp.config import servers_section

__all__ = [
    "TRUST_FILE",
    "TrustRecord",
    "is_trusted",
    "project_config_path",
    "project_mcp_section",
    "section_hash",
    "trust_project",
    "untrusted_project_servers",
]

TRUST_FILE = "trusted_projects.json"


@dataclass(frozen=True, kw_only=True)
class TrustRecord:
    project: str
    sha256: str
    servers: tuple[str, ...]
    trusted_at: str


def project_config_path(project_dir: Path) -> Path:
    return project_dir / ".geode" / "config.toml"


def _key(project_dir: Path) -> str:
    return str(project_dir.expanduser().resolve())


def project_mcp_section(project_dir: Path) -> dict[str, Any] | None:
    """The ``[mcp]`` table of the project's config, or None when there is none.

    Raises:
        ConfigError: the file exists but is not valid TOML.
    """
    path = project_config_path(project_dir)
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}. Fix the TOML syntax.") from exc
    section = data.get("mcp")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: `mcp` must be a table ([mcp.servers.NAME]).")
    return section


def section_hash(section: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a parsed ``[mcp]`` section."""
    canon = json.dumps(section, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def _trust_file(home: Path) -> Path:
    return home / TRUST_FILE


def _load(home: Path) -> dict[str, Any]:
    path = _trust_file(home)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        # A damaged trust file trusts nothing; `geode trust` rewrites it.
        return {}
    return data if isinstance(data, dict) else {}


def _server_names(section: dict[str, Any]) -> list[str]:
    try:
        return sorted(str(n) for n in servers_section(section))
    except ConfigError:
        return []


def is_trusted(project_dir: Path, home: Path, section: dict[str, Any] | None = None) -> bool:
    """Whether the project's current MCP section is the one the operator trusted."""
    if section is None:
        section = project_mcp_section(project_dir)
    if section is None:
        return False
    rec = _load(home).get(_key(project_dir))
    return isinstance(rec, dict) and rec.get("sha256") == section_hash(section)


def untrusted_project_servers(cwd: Path, home: Path) -> list[str]:
    """Names of the project's MCP servers that will not run (never trusted, or changed since)."""
    try:
        section = project_mcp_section(cwd)
    except ConfigError:
        return []  # the settings loader reports the broken file itself
    if section is None or is_trusted(cwd, home, section):
        return []
    return _server_names(section)


def trust_project(project_dir: Path, home: Path) -> TrustRecord:
    """Record the current MCP section of ``project_dir`` as trusted.

    Raises:
        ConfigError: the project has no ``.geode/config.toml`` with an ``[mcp]`` section.
    """
    section = project_mcp_section(project_dir)
    if section is None:
        raise ConfigError(
            f"{project_config_path(project_dir)} has no [mcp] section: nothing to trust."
        )
    rec = TrustRecord(
        project=_key(project_dir),
        sha256=section_hash(section),
        servers=tuple(_server_names(section)),
        trusted_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    data = _load(home)
    data[rec.project] = {
        "sha256": rec.sha256, "servers": list(rec.servers), "trusted_at": rec.trusted_at,
    }
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Written atomically: a crash mid-write must not leave a half file that trusts nothing
    # (or, worse, something).
    fd, tmp = tempfile.mkstemp(dir=home, prefix=".trusted_projects.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
        os.chmod(tmp, 0o600)
        os.replace(tmp, _trust_file(home))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rec
