"""/model and /usage in a thread, through the Telegram fake and a real daemon: /model lists
the binding's ids, refuses ids outside its list or the catalog, and a pick is used by the
thread's next model request, shown by /status and kept across a restart; /usage shows the
thread's and the sender's tokens as the usage ledger recorded them, against their caps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bots.testing.telegram import FakeTelegramServer
from geode.store.usage import UsageFilter
from tests.bots.conftest import CHAT, binding, finals, settled

ALPHA, BETA = "openai:alpha-1", "openai:beta-2"


def _thread(mid: int) -> str:
    return f"telegram:123456:{CHAT}:{mid}"


async def _ask(fake: FakeTelegramServer, text: str, *, reply_to: int, user: int = 42,
               expect: str) -> str:
    """Send ``text`` in the thread; the bot's first new message containing ``expect``."""
    before = len(fake.sent)
    fake.user_says(CHAT, text, from_user=user, reply_to=reply_to)

    def answered() -> list[str]:
        return [s.plain_text for s in fake.sent[before:] if expect in s.plain_text]

    await fake.wait_until(answered, within=10)
    return answered()[0]


def _last_bot_message(fake: FakeTelegramServer) -> int:
    return fake.messages_in(CHAT, from_bot=True)[-1].message_id


async def test_model_lists_refuses_sets_and_the_next_turn_uses_it_after_a_restart(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding(model=ALPHA, models=[BETA])])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot first", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: first"), within=10)
    assert stack.provider.calls[-1].model == ALPHA  # the binding's model until a pick
    bot = _last_bot_message(fake)

    shown = await _ask(fake, "/model", reply_to=bot, expect="this channel may use")
    assert shown == f"model: {ALPHA} (the channel's)\nthis channel may use: {ALPHA}, {BETA}"
    refused = await _ask(fake, "/model openai:gamma-3", reply_to=bot, expect="gamma")
    assert refused == ("openai:gamma-3 is not one this channel may use. "
                       f"Pick one of: {ALPHA}, {BETA}.")
    unknown = await _ask(fake, "/model gpt-nonesuch", reply_to=bot, expect="nonesuch")
    assert unknown.startswith("Unknown model 'gpt-nonesuch' (not in geode models)")
    assert unknown.endswith(f"This channel may use: {ALPHA}, {BETA}.")
    state = await stack.connector.layer.threads.get(_thread(mid))
    assert state is not None and state.model == ""  # nothing refused was recorded

    picked = await _ask(fake, f"/model {BETA}", reply_to=bot, expect="now uses")
    assert picked == f"This thread now uses {BETA}, from its next turn."
    calls = len(stack.provider.calls)
    await _ask(fake, "second", reply_to=bot, expect="answer to: second")
    assert [c.model for c in stack.provider.calls[calls:]] == [BETA]
    status = await _ask(fake, "/status", reply_to=bot, expect="session:")
    assert f"model: {BETA}" in status

    await settled(stack)
    await stack.stop()  # the pick is in the store: a restart (or replica) finds it
    await stack.start()
    shown = await _ask(fake, "/model", reply_to=bot, expect="this channel may use")
    assert shown.startswith(f"model: {BETA} (chosen with /model)")
    calls = len(stack.provider.calls)
    await _ask(fake, "third", reply_to=bot, expect="answer to: third")
    assert [c.model for c in stack.provider.calls[calls:]] == [BETA]

    # another thread of the same channel keeps the binding's model
    fake.user_says(CHAT, "@geode_bot elsewhere", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: elsewhere"), within=10)
    assert stack.provider.calls[-1].model == ALPHA


async def test_model_without_a_list_allows_only_the_bindings_model(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding()])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot hello", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: hello"), within=10)
    bot = _last_bot_message(fake)
    refused = await _ask(fake, f"/model {BETA}", reply_to=bot, expect="may use")
    assert refused == (f"{BETA} is not one this channel may use. "
                       "Pick one of: only the default model.")
    shown = await _ask(fake, "/model", reply_to=bot, expect="this channel may use")
    assert shown == "model: default (the channel's)\nthis channel may use: only the default model"


async def test_a_pick_the_configuration_no_longer_lists_is_not_used(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding(model=ALPHA, models=[BETA])])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot hello", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: hello"), within=10)
    bot = _last_bot_message(fake)
    await _ask(fake, f"/model {BETA}", reply_to=bot, expect="now uses")
    await settled(stack)
    await stack.stop()
    stack.bindings[:] = [binding(model=ALPHA)]  # the operator took BETA off the list
    await stack.start()
    calls = len(stack.provider.calls)
    await _ask(fake, "again", reply_to=bot, expect="answer to: again")
    assert [c.model for c in stack.provider.calls[calls:]] == [ALPHA]


async def test_usage_shows_the_threads_and_the_senders_recorded_tokens(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding(max_tokens_per_thread=100_000,
                                         max_tokens_per_user_per_day=500_000)])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot count me", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: count me"), within=10)
    bot = _last_bot_message(fake)
    await _ask(fake, "and again", reply_to=bot, expect="answer to: and again")
    await settled(stack)
    thread, user = await stack.store.usage.totals([
        UsageFilter(thread=_thread(mid)), UsageFilter(platform="telegram", user="42")])
    assert thread.tokens > 0 and thread.calls == 2 and user.tokens == thread.tokens

    usage = await _ask(fake, "/usage", reply_to=bot, expect="this thread:")
    lines = usage.splitlines()
    assert lines[0].startswith(f"usage today: {thread.tokens:,} tokens (2 model calls;")
    assert lines[1] == (f"this thread: {thread.tokens:,} tokens of 100,000 (channel cap) "
                        "(2 model calls)")
    assert lines[2] == f"you today: {user.tokens:,} tokens here of 500,000 (channel cap)"
    # somebody else in the same thread: the thread's tokens, none of their own
    other = await _ask(fake, "/usage", reply_to=bot, user=43, expect="this thread:")
    assert f"this thread: {thread.tokens:,} tokens" in other
    assert "you today: 0 tokens here of 500,000 (channel cap)" in other


async def test_an_unknown_id_in_models_is_exit_2_at_start(tmp_path: Path) -> None:
    from tests.cli.test_doctor_parity import CHANNEL, TOKENS
    from tests.cli.test_run_command import _env, geode

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        CHANNEL + '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n'
        'models = ["openai:fine", "claude-opsu-5-5"]\n')
    code, _out, err = await geode("serve", "--demo", env=_env(home, **TOKENS), cwd=tmp_path)
    assert code == 2, err
    assert "binding telegram -100: models: Unknown model id 'claude-opsu-5-5'. " in err
    assert "Did you mean: claude-opus-5-5" in err
