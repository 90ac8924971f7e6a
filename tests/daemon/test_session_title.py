"""A session's title is cut to one masked line by the harness, whoever names the session
(a chat thread hands its first message as it is; the terminal's first prompt is the title
of an untitled session)."""

from __future__ import annotations

from geode.daemon.session import SessionContext
from tests.daemon.conftest import DaemonMaker

KEY = "sk-ant-api03-TYPEDinTheThread0123456789abcdefXYZ"


async def test_a_given_title_is_masked_and_cut_to_one_line(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon(["ok"])
    said = f"please deploy\n  with {KEY} and then " + "tell me about it " * 10
    ctx = SessionContext(mode="DAEMON", workspace=daemon.workspace, session_id="s-title",
                         title=said)
    result = await daemon.run_turn(ctx, "hi", kind="channel", turn_id="t-1")
    assert result.ok
    assert daemon.runtime is not None and daemon.runtime.store is not None
    record = await daemon.runtime.store.sessions.get("s-title")
    assert record is not None
    title = record.title
    assert "sk-ant-api03-TYPED" not in title and "[REDACTED]" in title
    assert "\n" not in title and "  " not in title
    assert len(title) <= 60 and title.endswith("…") and title.startswith("please deploy with")
