"""What a session gives its tools: typed dependencies, fixed for the session.

A handler reads ``ctx.deps.<name>``. The composition root
(:mod:`geode.daemon.builders.tools`) fills them from the settings and the session (GEODE's own
files, the sandbox's limits, a computer-use session's display); the executor adds what it
owns (this session's kept results and their page size). A tool that needs something new adds
a typed field here: there is no bag of string keys to misspell.

Every field has a default that is safe when it is missing (no protected path is *added*,
the sandbox keeps its own limits, no network, no private host); a tool that cannot work
without one (``read_result`` without kept results, ``computer`` without a display) refuses
with a :class:`~geode.tools.errors.ToolFailure` that says what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from geode.search import SearchHit, SearchQuery

__all__ = ["KeptResults", "MemoryNote", "SandboxLimits", "SessionMemoryWrites", "SessionSkills",
           "ToolDeps", "WebSearch"]


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Per-call limits of one sandbox (``[sandbox]`` in config.toml)."""

    #: processes (and threads) at once; stops a fork bomb
    max_processes: int = 256
    #: address space of each process, MiB
    max_memory_mb: int = 2048
    #: largest file a process may write, MiB
    max_file_mb: int = 1024
    #: size of the private /tmp (and of /var/tmp), MiB; stops a disk fill through /tmp
    tmpfs_mb: int = 256
    #: uid / gid the command runs as inside its user namespace
    uid: int = 1000
    gid: int = 1000


class KeptResults(Protocol):
    """Reads back the whole text of a result that was cut (the executor's ``ResultKeeper``
    is one); only for results of ``session_id``."""

    async def read(self, *, session_id: str, result_id: str) -> str | None: ...


class WebSearch(Protocol):
    """The configured search backend with its key (``geode.search.WebSearchClient``)."""

    @property
    def name(self) -> str: ...

    async def search(self, query: SearchQuery) -> list[SearchHit]: ...


class SessionSkills(Protocol):
    """The skills a session is offered (``geode.skills.OfferedSkills``)."""

    def names(self) -> list[str]: ...

    def open(self, name: str, workspace: Path) -> str: ...


class MemoryNote(Protocol):
    """A memory entry as the ``memory`` tool reports it."""

    @property
    def id(self) -> str: ...

    @property
    def text(self) -> str: ...


class SessionMemoryWrites(Protocol):
    """The memory of the person a turn answers and of its binding
    (``geode.memory.SessionMemory``); whose memory it is was fixed by the host."""

    def owner(self, scope: Literal["user", "channel"]) -> str: ...

    async def add(self, scope: Literal["user", "channel"], text: str | None, *,
                  turn_id: str) -> MemoryNote: ...

    async def replace(self, scope: Literal["user", "channel"], entry_id: str | None,
                      text: str | None, *, turn_id: str) -> MemoryNote: ...

    async def remove(self, scope: Literal["user", "channel"], entry_id: str | None, *,
                     turn_id: str) -> MemoryNote: ...


@dataclass(frozen=True, kw_only=True)
class ToolDeps:
    """The typed dependencies of the built-in tools (one object per session)."""

    #: GEODE's own files (home, store and its side files, the Codex login): no tool reaches
    #: them, wherever the workspace is
    protected_paths: tuple[Path, ...] = ()
    #: ``run_bash``'s sandbox limits (``[sandbox]``)
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits)
    #: ``run_bash`` gets the network only when this is literally ``True``
    bash_network: bool = False
    #: more host paths ``run_bash`` binds read-only (absolute; e.g. a toolchain outside /usr)
    bash_ro_paths: tuple[str, ...] = ()
    #: exact ``host:port`` strings ``web_fetch`` may reach although they are private
    allow_private_hosts: tuple[str, ...] = ()
    #: ``web_fetch``'s caps (None: its own defaults)
    web_fetch_max_bytes: int | None = None
    web_fetch_timeout_s: float | None = None
    #: the X display ``computer`` drives (None: ``$DISPLAY``)
    display: str | None = None
    #: this session's kept results, which ``read_result`` pages (None: none are kept)
    kept_results: KeptResults | None = None
    #: the longest page ``read_result`` returns (a result this long passes whole)
    result_max_chars: int | None = None
    #: ``web_search``'s backend (None: ``[search]`` is not configured)
    search: WebSearch | None = None
    #: the skills the ``skill`` tool opens (None: none are offered)
    skills: SessionSkills | None = None
    #: the memory the ``memory`` tool writes (None: memory is off)
    memory: SessionMemoryWrites | None = None
