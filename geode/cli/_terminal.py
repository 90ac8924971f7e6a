"""The terminal side of a turn for ``ask`` and ``repl``: approval prompts, stdin reads that
Ctrl-C can interrupt, and event printing."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geode.executor.decisions import ApprovalRequest


async def terminal_answer(
    tool: str, args: Any, reason: str, always_ok: bool, summary: str = ""
) -> str:
    """Ask at this terminal; ``summary`` (a diff, a command) is shown instead of the raw input."""
    if summary:
        shown = "\n".join(f"  {ln}" for ln in summary.splitlines())
    else:
        raw = json.dumps(args, ensure_ascii=False, default=str)
        shown = "  input: " + (raw[:600] + " ..." if len(raw) > 600 else raw)
    choices = "[y]es / [n]o / [a]lways for this session" if always_ok else "[y]es / [n]o"
    sys.stderr.write(f"\n? approve {tool}: {reason}\n{shown}\n  {choices}: ")
    sys.stderr.flush()
    line = await read_line(sys.stdin.readline)
    word = line.strip().lower()
    if word in ("y", "yes"):
        return "allow"
    if word in ("a", "always") and always_ok:
        return "always"
    if not line:
        sys.stderr.write("(no answer: denied)\n")
    return "deny"


async def read_line(read: Callable[[], str]) -> str:
    """Run a blocking terminal read in a daemon thread.

    Not ``asyncio.to_thread``: its pool thread is joined at exit, so Ctrl-C while a prompt
    waits would hang until the user pressed Enter.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str] = loop.create_future()

    def deliver(value: str | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value or "")

    def work() -> None:
        try:
            value = read()
        except BaseException as exc:  # EOFError / KeyboardInterrupt go to the awaiting side
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, value, None)

    threading.Thread(target=work, name="geode-stdin", daemon=True).start()
    return await fut


def print_event(
    kind: str, data: dict[str, Any], *, streamed: bool, retries: bool = False,
    notes_only: bool = False,
) -> None:
    """Print one loop event: text on stdout, tools and model waits on stderr.

    ``retries``: also print each model retry (``ask``: the daemon's log line is not in this
    terminal; in-process, the retry's log line already is). ``notes_only``: only the model
    waits (``--json`` keeps stdout for its object).
    """
    from geode.loop import model_wait_text

    note = model_wait_text(kind, data) if kind == "model_waiting" or retries else None
    if note is not None:
        sys.stdout.flush()
        sys.stderr.write(f"{note}\n")
        sys.stderr.flush()
    elif notes_only:
        return
    elif kind == "text_delta":
        sys.stdout.write(str(data.get("text", "")))
        sys.stdout.flush()
    elif kind == "assistant_text" and not streamed:
        sys.stdout.write(str(data.get("text", "")) + "\n")
        sys.stdout.flush()
    elif kind == "tool_call":
        sys.stderr.write(f"→ {data.get('name')}\n")
    elif kind == "tool_result" and data.get("status") != "ok":
        sys.stderr.write(f"  ✗ {data.get('status')}: {str(data.get('text', ''))[:300]}\n")




class TerminalApprover:
    """Approvals asked in this terminal (the in-process REPL)."""

    async def __call__(self, request: ApprovalRequest) -> Any:
        return await terminal_answer(request.tool, dict(request.args), request.reason,
                                     request.always_allowed, request.summary)
