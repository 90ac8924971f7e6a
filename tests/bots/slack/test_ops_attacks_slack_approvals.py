"""Issue #30 finding 10 on Slack, approvals: ``/geode approve %`` (an id that is none) is
refused, never read as the channel's pending request; a non-approver's clicks, slash
commands and ``/approve`` replies are answered to them alone (ephemeral), never in the
thread."""

from __future__ import annotations

import pytest
from slack_helpers import ALICE, BOB, CH, bot_messages, mention, visible
from test_slack_approvals import ONLY_BOB, buttons, ephemerals_to, fake, posted, sid, start

from bots.workspaces import binding_workspace

__all__ = ["fake"]  # the fixture, re-used


@pytest.mark.parametrize("junk", ["%", "_", "*", "ab%", "../x"])
async def test_a_malformed_slash_id_decides_nothing(stacks, home, fake, junk):
    stack = await start(stacks, home, fake, "socket")
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    await posted(fake, root)
    await fake.slash_command("/geode", f"approve {junk}", CH, BOB)  # the approver
    await fake.wait_until(lambda: [m for m in bot_messages(fake, CH)
                                   if "not an approval request id" in m["text"]], within=10)
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending
    assert not (binding_workspace(stack.home, stack.bindings[0]) / "notes.txt").exists()


async def test_a_non_approver_floods_nothing_into_the_thread(stacks, home, fake):
    stack = await start(stacks, home, fake, "socket")
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    for _ in range(3):
        await fake.click(CH, req["ts"], ALICE, "Approve")
        await fake.slash_command("/geode", "approve", CH, ALICE)
        await fake.user_posts(CH, "/approve", user=ALICE, thread_ts=root)
    await fake.wait_until(lambda: len(ephemerals_to(fake, ALICE)) >= 6, within=10)
    assert set(ephemerals_to(fake, ALICE)) == {ONLY_BOB}
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending
    short = buttons(req)[0]["value"]
    await fake.slash_command("/geode", f"approve {short}", CH, BOB)
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    texts = [m["text"] for m in bot_messages(fake, CH)]
    assert not [t for t in texts if t.startswith("Only ")], texts
