"""Failures a tool handler raises on purpose.

A handler that refuses or fails raises :class:`ToolFailure` with a message written for the
model; the executor turns it into an ``is_error`` tool_result carrying that message. Any other
exception is a bug in the tool and is reported as such by the executor.

::

    GeodeError
    └── ToolFailure               a tool refused or failed; the message says why
        └── WorkspaceEscapeError  a path argument points outside the session's workspace
"""

from __future__ import annotations

from geode.errors import GeodeError

__all__ = ["ToolFailure", "WorkspaceEscapeError"]


class ToolFailure(GeodeError):
    """A tool refused or failed; ``str(exc)`` is shown to the model as the tool result."""


class WorkspaceEscapeError(ToolFailure):
    """A path argument resolves outside the workspace (``..``, absolute path, symlink, NUL)."""
