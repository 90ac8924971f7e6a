"""Approval requests with a long diff (#19: "long ones truncated with the full diff attached
as a file"): the request message shows the start of the diff, and the whole diff is
uploaded into the thread as ``<tool>-<short_id>.diff``, once per request, also across a
restart while the request waits (Telegram stack, real store)."""

from __future__ import annotations

from bots.workspaces import binding_workspace
from tests.bots.conftest import CHAT, finals
from tests.bots.test_approvals import _asked, _posted
from tests.bots.test_approvals_restart import _waiting_again

LONG = {"path": "big.txt",
        "content": "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n"
                           for i in range(200))}
SHORT = {"path": "notes.txt", "content": "hello\nworld\n"}


def _short_id(text: str) -> str:
    return text.split("(", 1)[1].split(")", 1)[0]


async def test_a_long_diff_is_cut_in_the_request_and_attached_whole(make_stack, fake):
    stack, _ = await _asked(make_stack, fake, LONG, text="write it")
    req = await _posted(stack, fake)
    short = _short_id(req.plain_text)
    assert "+line 3:" in req.plain_text and "+line 199:" not in req.plain_text  # cut
    assert f"The full diff is attached: write_file-{short}.diff" in req.plain_text
    await fake.wait_until(lambda: fake.uploads, within=10)
    [up] = fake.uploads
    assert up.filename == f"write_file-{short}.diff" and up.method == "sendDocument"
    diff = up.data.decode()
    assert diff.startswith("--- /dev/null\n+++ b/big.txt\n")
    assert all(f"+line {i}: the quick" in diff for i in range(200))

    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "big.txt").read_text() == LONG["content"]
    assert len(fake.uploads) == 1


async def test_a_restart_while_the_request_waits_does_not_attach_twice(make_stack, fake):
    stack, mid = await _asked(make_stack, fake, LONG, text="write it")
    req = await _posted(stack, fake)
    await fake.wait_until(lambda: fake.uploads, within=10)
    await stack.crash()

    await stack.start()
    await _waiting_again(stack, mid)  # the resumed turn waits for the same request
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    assert [u.filename for u in fake.uploads] == [f"write_file-{_short_id(req.plain_text)}.diff"]


async def test_a_short_diff_is_shown_whole_and_nothing_is_attached(make_stack, fake):
    stack, _ = await _asked(make_stack, fake, SHORT)
    req = await _posted(stack, fake)
    assert "+world" in req.plain_text and "attached" not in req.plain_text
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    assert fake.uploads == []
