"""What a proposed tool call will do, in plain words, for the person asked to approve it
(terminal, thin CLI, chat thread): a unified diff for ``write_file`` / ``edit_file``, the
command and working directory for ``run_bash``, server / tool / arguments for an MCP tool,
the action of ``computer`` (click at x,y / type "…" / the keys).

What the approver reads is what runs: whitespace and invisible characters that could push
the rest of a call out of sight (3,000 spaces and 200 newlines before ``; touch …``) are
shown as marks (``␠`` times 3000, ``⏎`` times 200, ``⟨U+200B⟩``) by :func:`show_invisible`, in the
preview and in the whole call (:func:`full_call`) that a chat attaches when it is longer than
its message can show (issue #30, finding 8)."""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from geode.tools.names import MCP_SEPARATOR

__all__ = ["describe_call", "full_call", "full_diff", "show_invisible"]

_MAX_DIFF_CHARS = 2500
_MAX_ARGS_CHARS = 1500
_MAX_READ_BYTES = 1_000_000
#: what a file that is not read is diffed from: the request says so instead of showing it
_UNSHOWN = "(its current content is not shown: the file has other names, hard links)\n"


#: a run of white space (any kind) or of invisible format characters (zero-width, bidi)
_WS_RUN = re.compile(r"[\s\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff]+")
#: control characters that are not white space
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]+")
_MARKS = {" ": "␠", "\n": "⏎", "\t": "⇥", "\r": "␍"}
#: a run this ordinary stays as it is (indentation, a blank line or two)
_PLAIN_SPACES, _PLAIN_NEWLINES, _PLAIN_TABS = 24, 3, 4


def _plain(run: str) -> bool:
    if not set(run) <= {" ", "\n", "\t"} or run.count("\n") > _PLAIN_NEWLINES:
        return False
    return (" " * _PLAIN_SPACES) not in run and ("\t" * _PLAIN_TABS) not in run


def _marked(run: str) -> str:
    out = []
    for ch, group in itertools.groupby(run):
        n = len(list(group))
        mark = _MARKS.get(ch) or f"⟨U+{ord(ch):04X}⟩"
        out.append(mark if n == 1 else f"{mark}×{n}")
    return "".join(out) + ("\n" if "\n" in run else "")


def show_invisible(text: str) -> str:
    """``text`` with what a reader cannot see made visible: long runs of spaces, newlines or
    tabs as a mark and a count (``␠``, ``⏎``, ``⇥``; a run with a newline still ends its
    line), control and invisible format characters (zero-width, bidi overrides, NBSP…) as
    ``⟨U+XXXX⟩``. Ordinary spacing (indentation, a blank line) stays as it is."""
    text = _CONTROL.sub(lambda m: _marked(m.group(0)), text)
    return _WS_RUN.sub(lambda m: m.group(0) if _plain(m.group(0)) else _marked(m.group(0)),
                       text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more chars)"


def _read_current(workspace: Path, rel: str) -> str | None:
    """The file's text now, if it is inside the workspace and readable (else None).

    Only a regular file with a single name is read: a hard link (GEODE's ``.env`` under
    another name, issue #30) is looked up but never opened, so its content cannot reach an
    approval request; it shows as "(its content is not shown)"."""
    try:
        root = workspace.resolve()
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            return None
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_nlink != 1:
            return _UNSHOWN
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            now = os.fstat(f.fileno())
            if (now.st_dev, now.st_ino, now.st_nlink) != (st.st_dev, st.st_ino, 1):
                return _UNSHOWN  # swapped since the look
            data = f.read(_MAX_READ_BYTES + 1)
        if len(data) > _MAX_READ_BYTES:
            return None
        return data.decode("utf-8", errors="replace")
    except OSError:
        return None


def _diff(path: str, before: str | None, after: str) -> str:
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile="/dev/null" if before is None else f"a/{path}", tofile=f"b/{path}",
    )
    return "".join(lines) or "(no change)"


def full_diff(tool: str, args: Mapping[str, Any], workspace: Path | None) -> str | None:
    """The whole unified diff of a ``write_file`` / ``edit_file`` call (None for other
    tools); :func:`describe_call` shows it cut. Blocking file read: run it in a thread."""
    path = str(args.get("path", ""))
    if tool == "write_file" and isinstance(args.get("content"), str):
        before = _read_current(workspace, path) if workspace is not None else None
        return _diff(path, before, args["content"])
    if tool == "edit_file" and isinstance(args.get("old_string"), str):
        before = _read_current(workspace, path) if workspace is not None else None
        old, new = args["old_string"], str(args.get("new_string", ""))
        if before is not None and old in before:
            count = -1 if args.get("replace_all") else 1
            return _diff(path, before, before.replace(old, new, count))
        return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                            new.splitlines(keepends=True),
                                            fromfile=f"a/{path}", tofile=f"b/{path}"))
    return None


def full_call(tool: str, args: Mapping[str, Any], workspace: Path | None) -> str:
    """The whole of what :func:`describe_call` shows cut: the diff, the command (with its
    options) or the arguments, with :func:`show_invisible` applied. Blocking file read."""
    diff = full_diff(tool, args, workspace)
    if diff is not None:
        return show_invisible(diff)
    if tool == "run_bash":
        cwd = str(args.get("cwd") or args.get("workdir") or ".")
        extra = {k: v for k, v in args.items() if k not in ("command", "cwd", "workdir")}
        more = f"\noptions: {json.dumps(extra, ensure_ascii=False)}" if extra else ""
        return show_invisible(f"cwd {show_invisible(cwd)}\n{args.get('command', '')}{more}")
    return show_invisible(json.dumps(dict(args), ensure_ascii=False, indent=1, default=str))


def describe_call(tool: str, args: Mapping[str, Any], workspace: Path | None, *,
                  diff_chars: int = _MAX_DIFF_CHARS) -> str:
    """What the call will do, in plain words, a diff, command or arguments cut after
    ``diff_chars`` (blocking file read: run it in a thread). White space that could hide
    the rest of the call is shown as marks (:func:`show_invisible`)."""
    path = show_invisible(str(args.get("path", "")))
    diff = full_diff(tool, args, workspace)
    if tool == "write_file" and diff is not None:
        before = _read_current(workspace, str(args.get("path", ""))) if workspace else None
        head = f"write_file {path} ({'new file' if before is None else 'replaces it'})"
        return f"{head}\n```diff\n{_clip(show_invisible(diff), diff_chars)}\n```"
    if tool == "edit_file" and diff is not None:
        return f"edit_file {path}\n```diff\n{_clip(show_invisible(diff), diff_chars)}\n```"
    if tool == "run_bash":
        cwd = show_invisible(str(args.get("cwd") or args.get("workdir") or "."))
        extra = {k: v for k, v in args.items() if k not in ("command", "cwd", "workdir")}
        more = (f"\noptions: {show_invisible(json.dumps(extra, ensure_ascii=False))}"
                if extra else "")
        command = show_invisible(str(args.get("command", "")))
        return (f"run_bash in the sandbox (no network, writes only in the workspace), "
                f"cwd {cwd}:\n```\n{_clip(command, diff_chars)}\n```" + more)
    if tool == "computer":
        return _describe_computer(args)
    shown = _clip(show_invisible(json.dumps(dict(args), ensure_ascii=False, indent=1,
                                            default=str)),
                  min(diff_chars, _MAX_ARGS_CHARS))
    server, sep, name = tool.partition(MCP_SEPARATOR)
    if sep:
        return f"MCP server {server}, tool {name}, arguments:\n```\n{shown}\n```"
    return f"{tool}, arguments:\n```\n{shown}\n```"


def _describe_computer(args: Mapping[str, Any]) -> str:
    """A ``computer`` action in words: where it clicks, what it types, which keys."""
    action = str(args.get("action", ""))
    at = f"({args.get('x')}, {args.get('y')})"
    if action == "click":
        words = f"{args.get('button') or 'left'}-click at {at}"
    elif action == "type":
        text = str(args.get("text") or "")
        shown = _clip(show_invisible(text), _MAX_ARGS_CHARS)
        words = f"type {json.dumps(shown, ensure_ascii=False)}"
    elif action == "key":
        words = f"press the keys {args.get('keys') or ''}".rstrip()
    elif action == "scroll":
        words = f"scroll {args.get('direction') or 'down'} {args.get('amount') or 3} at {at}"
    elif action == "mouse_move":
        words = f"move the mouse to {at}"
    elif action == "screenshot":
        words = "take a screenshot"
    else:
        words = json.dumps(dict(args), ensure_ascii=False, default=str)
    return f"computer: {words}"
