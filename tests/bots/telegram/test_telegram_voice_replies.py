"""Spoken replies on Telegram (real PTB against the Telegram fake, the real OpenAI SDK against
the voice fake): a binding with ``voice_replies = true`` answers a voice note with the text
and then the same text spoken (``/audio/speech``, posted with ``sendVoice``); a text message
is answered in text only; a speech failure leaves the text answer, once; a delivery
recovered after a crash speaks once, and a spoken reply already sent is not sent again."""

from __future__ import annotations

import asyncio
from typing import Any

from _harness import crash_at

from geode.providers.scripted import ScriptedProvider
from geode.testing.fake_voice import FAKE_SPEECH, FakeVoice
from tests.bots.conftest import CHAT, binding
from tests.bots.telegram.test_telegram_voice import (  # noqa: F401  (fixtures)
    OGG,
    make_voice_stack,
    replies,
    voice,
    voice_note,
)

SPEECH = {"tts_model": "tts-1", "voice": "nova"}


def voices(fake: Any) -> list[Any]:
    return [u for u in fake.uploads if u.method == "sendVoice"]


def speaking(make_voice_stack: Any, provider: ScriptedProvider, **kw: Any) -> Any:  # noqa: F811
    stack = make_voice_stack(provider, **SPEECH, **kw)
    stack.bindings = [binding(voice_replies=True)]
    return stack


async def test_a_voice_note_is_answered_in_text_and_then_spoken(
        make_voice_stack: Any, fake: Any, voice: FakeVoice) -> None:  # noqa: F811
    provider = ScriptedProvider(["The database restarts at 23:00."], repeat_last=True)
    stack = speaking(make_voice_stack, provider)
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=voice_note(fake, OGG))
    await fake.wait_until(lambda: voices(fake), within=15)
    [call] = voice.speech_requests
    assert (call.model, call.voice, call.response_format) == ("tts-1", "nova", "opus")
    assert call.input == "The database restarts at 23:00."
    assert call.key == "sk-voice-test"
    [spoken] = voices(fake)
    assert spoken.data == FAKE_SPEECH + call.input.encode()
    assert len(replies(fake, "The database restarts at 23:00.")) == 1
    # the text is in the thread first, the voice note beside it
    [answer] = [m for m in fake.sent if "The database restarts" in m.plain_text]
    assert answer.message_id < spoken.message_id


async def test_a_text_message_or_a_binding_without_the_switch_is_not_spoken(
        make_voice_stack: Any, fake: Any, voice: FakeVoice) -> None:  # noqa: F811
    provider = ScriptedProvider(["in writing"], repeat_last=True)
    stack = speaking(make_voice_stack, provider)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot hello", from_user=42)
    await fake.wait_until(lambda: replies(fake, "in writing"), within=15)
    await stack.stop()
    stack.bindings = [binding()]  # voice_replies off (the default)
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=voice_note(fake, OGG))
    await fake.wait_until(lambda: len(replies(fake, "in writing")) == 2, within=15)
    await asyncio.sleep(0.3)
    assert voice.speech_requests == [] and voices(fake) == []


async def test_a_speech_failure_leaves_the_text_answer_once(
        make_voice_stack: Any, fake: Any, voice: FakeVoice) -> None:  # noqa: F811
    voice.speech_body = b"<html>not audio</html>"
    provider = ScriptedProvider(["still in text"], repeat_last=True)
    stack = speaking(make_voice_stack, provider)
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=voice_note(fake, OGG))
    await fake.wait_until(lambda: voice.speech_requests, within=15)
    await asyncio.sleep(0.3)
    assert len(replies(fake, "still in text")) == 1
    assert voices(fake) == [] and fake.uploads == []


async def test_a_delivery_recovered_after_a_crash_speaks_once(
        make_voice_stack: Any, fake: Any, voice: FakeVoice) -> None:  # noqa: F811
    provider = ScriptedProvider(["recorded before the crash"], repeat_last=True)
    stack = speaking(make_voice_stack, provider)
    hit, fault = crash_at("final_recorded")  # the answer recorded, nothing delivered
    stack.fault = fault
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=voice_note(fake, OGG))
    await asyncio.wait_for(hit.wait(), 15)
    await stack.crash()
    assert voices(fake) == []
    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: voices(fake), within=20)
    await asyncio.sleep(0.3)
    assert len(replies(fake, "recorded before the crash")) == 1
    assert len(voices(fake)) == 1 and len(voice.speech_requests) == 1


async def test_a_spoken_reply_sent_before_a_crash_is_not_sent_again(
        make_voice_stack: Any, fake: Any, voice: FakeVoice) -> None:  # noqa: F811
    provider = ScriptedProvider(["said once"], repeat_last=True)
    stack = speaking(make_voice_stack, provider)
    hit, fault = crash_at("voice_reply_sent")
    stack.fault = fault
    await stack.start()
    fake.user_says(CHAT, "", from_user=42, extra=voice_note(fake, OGG))
    await asyncio.wait_for(hit.wait(), 15)
    await stack.crash()
    stack.fault = None
    await stack.start()
    fake.user_says(CHAT, "@geode_bot and now?", from_user=42)  # the restarted layer works
    await fake.wait_until(lambda: len(replies(fake, "said once")) == 2, within=20)
    assert len(voices(fake)) == 1 and len(voice.speech_requests) == 1
