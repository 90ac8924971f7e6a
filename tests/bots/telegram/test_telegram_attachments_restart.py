"""Attachments across a crash, on Telegram (real PTB against the fake): what the layer
received is recorded with the inbound event, so the recovered turn neither downloads a file
again nor asks the platform about a refused one again, and a saved file that vanished in the
meantime is reported to the model, not fetched again. ``geode sessions show --json`` lists
what a session received."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from typing import Any

import pytest
from _harness import crash_at

from geode.providers.scripted import ScriptedProvider, ToolCall
from tests.bots.conftest import (
    CHAT,
    Stack,
    binding,
    finals,
    last_user_text,
    settled,
    user_messages,
)

LOG = b"2026-12-04 boot ok\n2026-12-04 ERROR disk full on /var\n"
MENTION = {"caption": "@geode_bot why?",
           "caption_entities": [{"type": "mention", "offset": 0, "length": 10}]}


def document(fake: Any, content: bytes, name: str, mime: str, *, declared: int | None = None
             ) -> dict[str, Any]:
    fid = fake.add_file(content, file_path=f"documents/{name}")
    size = len(content) if declared is None else declared
    return {"document": {"file_id": fid, "file_unique_id": f"u{fid}", "file_name": name,
                         "mime_type": mime, "file_size": size}, **MENTION}


def get_file_calls(fake: Any) -> int:
    return sum(1 for c in fake.calls if c.method.lower() == "getfile")


def session_of(mid: int) -> str:
    return f"telegram:123456:{CHAT}:{mid}"


async def crash_then_restart(stack: Stack, fake: Any, point: str, extra: dict[str, Any],
                             between: Any = None) -> int:
    """Send a message with ``extra`` (a document), crash at ``point``, run ``between()``,
    restart; returns the message id."""
    hit, fault = crash_at(point)
    stack.fault = fault  # type: ignore[assignment]
    await stack.start()
    mid: int = fake.message_id_for(fake.user_says(CHAT, "", from_user=42, extra=extra))
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    if between is not None:
        between()
    stack.fault = None
    await stack.start()
    return mid


async def sessions_show(stack: Stack, session: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``geode sessions show SESSION --json`` against the stack's store."""
    from typer.testing import CliRunner

    from geode.cli import cmd_sessions  # noqa: F401 - registers the command
    from geode.cli.app import app
    from geode.logging import configure_logging

    monkeypatch.setenv("GEODE_HOME", str(stack.home))
    monkeypatch.setenv("GEODE_STORE__URL", stack.store_url)
    try:
        out = await asyncio.to_thread(CliRunner().invoke, app,
                                      ["sessions", "show", session, "--json"])
        text = await asyncio.to_thread(CliRunner().invoke, app, ["sessions", "show", session])
    finally:
        configure_logging(stream=sys.stderr)
    assert out.exit_code == 0, out.output
    assert text.exit_code == 0, text.output
    assert "attachments received" in text.output
    return json.loads(out.output)


# attachment_saved: renamed into place, the record not yet written (the file is adopted);
# attachments_received: recorded, the turn not yet run
@pytest.mark.parametrize("point", ["attachment_saved", "attachments_received"])
async def test_a_file_received_before_a_crash_is_not_downloaded_again_and_reaches_the_model(
    make_stack: Any, fake: Any, home: Any, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    provider = ScriptedProvider(["read it"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding()])
    mid = await crash_then_restart(stack, fake, point,
                                   document(fake, LOG, "boot.log", "text/plain"))
    await fake.wait_until(lambda: finals(fake, "read it"), within=15)
    assert fake.downloads == ["documents/boot.log"]  # once, before the crash
    assert get_file_calls(fake) == 1
    prompt = last_user_text(provider.calls[0])  # the model saw nothing before the crash
    assert "ERROR disk full on /var" in prompt and f"threads/{mid}/{mid}-0-boot.log" in prompt
    await settled(stack)
    info = await sessions_show(stack, session_of(mid), monkeypatch)
    [att] = info["attachments"]
    assert (att["name"], att["status"], att["size"], att["path"]) == (
        "boot.log", "saved", len(LOG), f"threads/{mid}/{mid}-0-boot.log")
    assert att["sha256"] == hashlib.sha256(LOG).hexdigest() and att["file_ref"].startswith("FILE")
    assert (home / "workspaces" / f"telegram-{CHAT}" / att["path"]).read_bytes() == LOG


async def test_a_saved_file_gone_after_the_crash_is_reported_to_the_model_not_fetched_again(
    make_stack: Any, fake: Any, home: Any
) -> None:
    provider = ScriptedProvider(["noted"], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding()])
    folder = home / "workspaces" / f"telegram-{CHAT}" / "threads"

    def remove() -> None:
        [saved] = list(folder.rglob("*boot.log"))
        saved.unlink()

    await crash_then_restart(stack, fake, "attachments_received",
                             document(fake, LOG, "boot.log", "text/plain"), between=remove)
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.endswith("noted")],
                          within=15)
    assert fake.downloads == ["documents/boot.log"]  # not fetched again
    prompt = last_user_text(provider.calls[0])
    assert "boot.log was received earlier" in prompt and "no longer there" in prompt
    assert "ERROR disk full" not in prompt
    [reply] = [s.plain_text for s in fake.sent if s.plain_text.endswith("noted")]
    assert "I no longer have boot.log" in reply


async def _big_csv_across_a_crash(make_stack: Any, fake: Any, provider: ScriptedProvider,
                                  point: str) -> tuple[Any, int, str]:
    """big.csv (5000 bytes, the message says 10) to a binding that takes 1 kB, a crash at
    ``point`` and a restart: the stack, the message's id and the one reply ending "ok"."""
    stack = make_stack(provider=provider, bindings=[binding(max_attachment_mb=0.001)])
    mid = await crash_then_restart(
        stack, fake, point, document(fake, b"x" * 5000, "big.csv", "text/csv", declared=10))
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.endswith("ok")],
                          within=15)
    [reply] = [s.plain_text for s in fake.sent if s.plain_text.endswith("ok")]
    return stack, mid, reply


async def test_a_refused_file_is_not_asked_for_again_after_a_crash(
    make_stack: Any, fake: Any, home: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the message understates the size: only getFile tells the truth, so the refusal
    # comes from asking the platform (which a restart must not do again)
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack, mid, reply = await _big_csv_across_a_crash(make_stack, fake, provider,
                                                      "attachments_received")
    assert get_file_calls(fake) == 1 and fake.downloads == []
    assert "did not read big.csv" in reply and "limit" in reply
    assert "big.csv not read" in last_user_text(provider.calls[0])
    await settled(stack)
    info = await sessions_show(stack, session_of(mid), monkeypatch)
    assert [(a["name"], a["status"], a["path"]) for a in info["attachments"]] == [
        ("big.csv", "refused", "")]
    assert "limit" in info["attachments"][0]["reason"]


async def test_a_resumed_turn_still_tells_the_user_what_was_refused(
    make_stack: Any, fake: Any
) -> None:
    # the crash comes after the model proposed a tool: the turn is checkpointed as started,
    # so recovery resumes it (its prompt is in the session) instead of composing it again
    provider = ScriptedProvider([ToolCall("list_dir", {"path": "."}), "ok"], repeat_last=True)
    stack, mid, reply = await _big_csv_across_a_crash(make_stack, fake, provider, "tool_call")
    assert get_file_calls(fake) == 1
    assert reply.startswith("⚠️ I did not read big.csv") and "limit" in reply
    restored = await stack.store.checkpointer(session_of(mid)).load()
    assert sum("big.csv not read" in t for t in user_messages(restored.messages)) == 1
