"""MCP server entries and their resource policies, parsed from every place they may come from.

Two shapes are accepted, both mapping a server name to one entry:

- the common JSON shape of ``--mcp-config FILE`` (and of Claude Desktop / Claude Code):
  ``{"mcpServers": {NAME: {"command", "args", "env"} | {"url", "headers"}}}``;
- the TOML section of ``config.toml``: ``[mcp.servers.NAME]`` with the same keys
  (``[mcp.mcpServers.NAME]`` is accepted too).

A *resource policy* (``[mcp.servers.NAME.policy]``, or ``"policy": {...}`` in JSON) is what
lets a server's tools be classified: without one, every tool of the server counts as
``external`` whatever the server claims in its annotations, because the annotations come
from the server itself and an unreviewed server must not be able to call itself read-only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from geode.errors import ConfigError
from geode.tools.base import PersonalData, Safety

__all__ = [
    "ServerConfig",
    "ServerPolicy",
    "ToolPolicy",
    "expand_vars",
    "load_config_file",
    "parse_servers",
    "servers_section",
]

#: provider tool names allow ``[A-Za-z0-9_-]``; ``__`` separates server and tool
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ToolPolicy(BaseModel):
    """Operator overrides for one tool; unset fields fall back to the server policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    safety: Safety | None = None
    idempotent: bool | None = None
    resource_keys: tuple[str, ...] | None = None
    personal_data: PersonalData | None = None
    deadline_s: float | None = Field(default=None, gt=0)


class ServerPolicy(BaseModel):
    """The resource policy of one server (its presence is what makes annotations count)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: level of a tool with no override and no read-only annotation
    safety: Safety = "external"
    idempotent: bool = False
    #: keys every call of this server's tools locks (``host:api.example.com``); ``{arg}``
    #: placeholders are filled from the call's arguments
    resource_keys: tuple[str, ...] = ()
    personal_data: PersonalData = "none"
    #: whether ``readOnlyHint`` / ``idempotentHint`` are believed for tools without override
    trust_annotations: bool = True
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)


class _Entry(BaseModel):
    """One raw server entry; unknown keys of other hosts' formats are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    policy: ServerPolicy | None = None
    timeout_s: float = Field(default=60.0, gt=0, alias="timeout")
    startup_timeout_s: float | None = Field(default=None, gt=0)
    disabled: bool = False

    @field_validator("env", "headers", mode="before")
    @classmethod
    def _stringify(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): str(val) for k, val in v.items()}
        return v


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """One MCP server as GEODE will run or connect to it.

    ``env``/``headers``/``args``/``url`` may contain ``${VAR}`` references, expanded from
    the secrets when the server starts (never when the config is parsed, so a missing
    variable disables only that server).
    """

    name: str
    origin: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    policy: ServerPolicy | None = None
    timeout_s: float = 60.0
    startup_timeout_s: float | None = None

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"


def _entry_to_config(name: str, raw: Any, origin: str, default_cwd: str | None) -> ServerConfig:
    where = f"MCP server {name!r} in {origin}"
    if not _NAME_RE.match(name) or "__" in name:
        raise ConfigError(
            f"{where}: the name may use letters, digits, '-' and single '_' only "
            "(tools are named SERVER__TOOL). Rename it."
        )
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a table/object with `command` or `url`.")
    try:
        entry = _Entry.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where} is invalid:\n{exc}") from exc
    if bool(entry.command) == bool(entry.url):
        raise ConfigError(
            f"{where}: give exactly one of `command` (stdio server) or `url` (streamable HTTP)."
        )
    if entry.type in ("sse",):
        raise ConfigError(
            f"{where}: the legacy SSE transport is not supported; use the server's streamable "
            "HTTP endpoint (`url`, usually ending in /mcp)."
        )
    return ServerConfig(
        name=name,
        origin=origin,
        command=entry.command,
        args=tuple(entry.args),
        env=dict(entry.env),
        cwd=entry.cwd or (default_cwd if entry.command else None),
        url=entry.url,
        headers=dict(entry.headers),
        policy=entry.policy,
        timeout_s=entry.timeout_s,
        startup_timeout_s=entry.startup_timeout_s,
    )


def servers_section(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The NAME → entry mapping of a JSON file or a ``[mcp]`` section (``{}`` if none)."""
    found: dict[str, Any] = {}
    for key in ("mcpServers", "servers"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"`{key}` must map server names to entries, got {type(value).__name__}."
            )
        found.update(value)
    return found


def parse_servers(
    data: Mapping[str, Any], *, origin: str, default_cwd: str | None = None
) -> list[ServerConfig]:
    """Parse every enabled server entry of ``data`` (a JSON file or a ``[mcp]`` section).

    Raises:
        ConfigError: a malformed entry; the message names the server and where it came from.
    """
    out = []
    for name, raw in servers_section(data).items():
        if isinstance(raw, Mapping) and raw.get("disabled") is True:
            continue
        out.append(_entry_to_config(str(name), raw, origin, default_cwd))
    return out


def load_config_file(path: Path) -> list[ServerConfig]:
    """Read a ``--mcp-config`` JSON file (``{"mcpServers": {...}}``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"Cannot read MCP config {path}: {exc.strerror or exc}.") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"MCP config {path} is not valid JSON: {exc}.") from exc
    if not isinstance(data, Mapping) or not servers_section(data):
        raise ConfigError(
            f'MCP config {path} has no servers: expected {{"mcpServers": {{"NAME": '
            '{"command": "...", "args": [...]}}}}.'
        )
    return parse_servers(data, origin=str(path))


class MissingVariable(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def expand_vars(value: str, lookup: Any) -> str:
    """Expand ``${VAR}`` / ``${VAR:-default}`` with ``lookup(VAR)`` (the secrets).

    Raises:
        MissingVariable: a referenced variable is unset and has no default.
    """

    def sub(m: re.Match[str]) -> str:
        got = lookup(m.group(1))
        if got:
            return str(got)
        if m.group(2) is not None:
            return m.group(2)
        raise MissingVariable(m.group(1))

    return _VAR_RE.sub(sub, value)
