"""Per-binding workspaces: the folder a channel's turns (file tools, the sandbox) are confined to.

Each binding gets its own folder by default, ``$GEODE_HOME/workspaces/<platform>-<channel>/``,
so a channel allowed to write cannot plant a file that another channel reads. ``workspace =
"DIR"`` on a binding overrides it (a relative DIR is taken under ``$GEODE_HOME/workspaces/``);
two bindings share a folder only when both name it. Every thread has a subfolder,
``threads/<thread_root>/``, for what the layer saves for it (attachments).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = ["binding_workspace", "check_workspaces", "thread_folder", "workspaces_root"]

#: anything but these is replaced in a folder name made from a platform id
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def workspaces_root(home: Path) -> Path:
    """Where the per-binding workspaces live (``$GEODE_HOME/workspaces``)."""
    return home / "workspaces"


def _safe(part: str) -> str:
    # ids are platform-made ("-100123", "C0123", "1234567890"); never a path separator,
    # never "." / ".." (a name made only of dots gets a prefix)
    name = _UNSAFE.sub("_", part) or "_"
    return f"_{name}" if set(name) == {"."} else name


def binding_workspace(home: Path, binding: BindingSettings) -> Path:
    """The absolute workspace folder of ``binding`` (not created here)."""
    root = workspaces_root(home)
    if binding.workspace.strip():
        given = Path(binding.workspace.strip()).expanduser()
        return (given if given.is_absolute() else root / given).resolve()
    return (root / f"{_safe(binding.platform)}-{_safe(binding.channel)}").resolve()


def thread_folder(workspace: Path, thread_root: str) -> Path:
    """A thread's subfolder of its binding's workspace (attachments go there)."""
    return workspace / "threads" / _safe(thread_root)


def check_workspaces(home: Path, bindings: Iterable[BindingSettings]) -> None:
    """Refuse bindings whose workspaces overlap unless they are configured to share one.

    Two bindings sharing a folder must both name it with ``workspace``; a folder inside
    another binding's folder is refused always (the outer channel would read the inner's
    files). Raises :class:`ConfigError` naming both bindings.
    """
    seen: list[tuple[Path, BindingSettings]] = []
    for b in bindings:
        ws = binding_workspace(home, b)
        for other_ws, other in seen:
            if (b.platform, b.channel, b.team) == (other.platform, other.channel, other.team):
                continue
            same = ws == other_ws
            if same and b.workspace.strip() and other.workspace.strip():
                continue  # both name it: sharing is configured
            if same or ws.is_relative_to(other_ws) or other_ws.is_relative_to(ws):
                raise ConfigError(
                    f"binding {b.platform} {b.channel} and binding {other.platform} "
                    f"{other.channel} would share workspace files ({ws} / {other_ws}); give "
                    "each its own folder, or set the same `workspace` on both to share one")
        seen.append((ws, b))
