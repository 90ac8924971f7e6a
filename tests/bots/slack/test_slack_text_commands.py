"""``/geode model ID``, ``/geode remind WHEN WHAT`` and ``/geode reminders cancel ID`` reach
the same thread commands as typed ``/model``, ``/remind``, ``/reminders`` (the words after
the name are the command's text; a last word that is a thread link or ts picks the thread),
and the manifest and the help list them."""

from __future__ import annotations

from slack_helpers import ALICE, CH

from bots.slack._convert import command_event, parse_slash


def test_the_words_after_the_name_are_the_commands_text() -> None:
    def text(words: str) -> tuple[str, str | None]:
        cmd = parse_slash({"channel_id": CH, "user_id": ALICE, "text": words,
                           "trigger_id": "t1"})
        assert cmd is not None
        return command_event(cmd, team="T1", thread_root=cmd.thread or "1.0").text, cmd.thread

    assert text("model openai:beta-2") == ("/model openai:beta-2", None)
    assert text("remind in 10m check the Deploy") == ("/remind in 10m check the Deploy", None)
    assert text("reminders cancel rem-1a2b 1700000000.000100") == (
        "/reminders cancel rem-1a2b", "1700000000.000100")
    assert text("usage") == ("/usage", None)


def test_the_manifest_and_the_help_list_the_text_commands() -> None:
    from pathlib import Path

    from bots.slack.inbound import SLACK_HELP

    text = (Path(__file__).parents[3] / "deploy" / "slack-manifest.yaml").read_text()
    (hint,) = [ln for ln in text.splitlines() if "usage_hint:" in ln]
    for words in ("model [ID]", "usage", "remind WHEN WHAT", "reminders [cancel ID]"):
        assert words in hint
        assert f"`/geode {words}" in SLACK_HELP
