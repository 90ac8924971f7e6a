"""Issue #30 finding 10 on Discord, approvals: ``/approve %`` (an id that is none) is
refused, never read as the pending request; a non-approver's typed ``/approve`` and clicks
put nothing into the thread (clicks: an ephemeral answer)."""

from __future__ import annotations

import pytest
from _discord_stack import dbinding, dfake, make_dstack, texts_in  # noqa: F401  (fixtures)
from test_discord_approvals import _followups, _requested

from bots.workspaces import binding_workspace


@pytest.mark.parametrize("junk", ["%", "_", "*", "ab%"])
async def test_a_malformed_id_decides_nothing(make_dstack, dfake, junk):  # noqa: F811
    stack, root, _ = await _requested(make_dstack, dfake)
    bob = dfake.bob  # type: ignore[attr-defined]
    await dfake.user_says(dfake.channel_id, f"/approve {junk}", author_id=bob, thread_id=root)
    await dfake.wait_for(lambda: any("not an approval request id" in t
                                     for t in texts_in(dfake, root)), timeout=10)
    [rec] = await stack.connector.layer.approvals.pending(platform="discord")
    assert rec.pending
    assert not (binding_workspace(stack.home, stack.bindings[0]) / "notes.txt").exists()


async def test_a_non_approver_floods_nothing_into_the_thread(make_dstack, dfake):  # noqa: F811
    _, root, req = await _requested(make_dstack, dfake)
    bob = dfake.bob  # type: ignore[attr-defined]
    before = len(texts_in(dfake, root))
    clicks = []
    for _ in range(3):
        clicks.append(await dfake.user_clicks(int(req["id"]), "Approve"))  # alice
        await dfake.user_says(dfake.channel_id, "/approve", thread_id=root)  # alice, typed
    for iid in clicks:
        await dfake.wait_for(lambda iid=iid: bool(_followups(dfake, iid)), timeout=10)
        assert all(f.ephemeral for f in _followups(dfake, iid))
    short = req["content"].split("(", 1)[1].split(")", 1)[0]
    await dfake.user_says(dfake.channel_id, f"/approve {short}", author_id=bob, thread_id=root)
    await dfake.wait_for(lambda: any(t == "done" for t in texts_in(dfake, root)), timeout=10)
    said = texts_in(dfake, root)[before:]
    assert not [t for t in said if t.startswith("Only ")], said
