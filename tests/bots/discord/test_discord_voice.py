"""Voice messages on Discord (the Discord fake, the real OpenAI SDK against the transcription
fake): with ``[voice]`` configured a voice message (``duration_secs`` + ``waveform``) or an
``audio/*`` attachment is checked against the voice limits on what it declares before any
download, saved, transcribed, given to the model as a marked transcript and shown in the
thread ("🎙 …") before the answer. An oversized one or one that is not audio never reaches
the endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _discord_stack import (  # noqa: F401  (fixtures)
    dbinding,
    dfake,
    make_dstack,
    texts_in,
)

from geode.providers.scripted import ScriptedProvider
from geode.testing.fake_voice import FAKE_SPEECH, FakeVoice
from tests.bots._harness import user_messages

OGG = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + b"\x01" * 200
SAID = "roll back the canary"


@pytest.fixture
async def voice(home: Path) -> AsyncIterator[FakeVoice]:
    async with FakeVoice(text=SAID) as v:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[voice]\nmodel = "whisper-1"\nbase_url = "{v.base_url}"\nmax_duration_s = 120\n')
        yield v


def replies(fake, needle: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [t for cid in list(fake.channels) for t in texts_in(fake, cid) if needle in t]


async def test_a_voice_message_is_transcribed_and_shown_before_the_answer(
        make_dstack, dfake, voice: FakeVoice) -> None:  # noqa: F811 (fixtures)
    provider = ScriptedProvider(["rolling back"], repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[dbinding(dfake, require_mention=False)])
    await stack.start()
    att = dfake.add_voice_message(OGG, duration_secs=3.4)
    await dfake.user_says(dfake.channel_id, "", files=[att])
    await dfake.wait_for(lambda: replies(dfake, "rolling back"), timeout=15)
    [call] = voice.requests
    assert call.data == OGG and call.filename.endswith(".ogg")
    prompt = user_messages(provider.calls[0].messages)[-1]
    assert SAID in prompt and "automatic transcript" in prompt
    [reply] = replies(dfake, "rolling back")
    assert reply.index(f"🎙 {SAID}") < reply.index("rolling back")
    assert dfake.downloads == [f"{att['id']}/voice-message.ogg"]


async def test_an_audio_attachment_is_transcribed_too(
        make_dstack, dfake, voice: FakeVoice) -> None:  # noqa: F811 (fixtures)
    provider = ScriptedProvider(["heard"], repeat_last=True)
    stack = make_dstack(provider=provider)
    await stack.start()
    att = dfake.add_attachment(OGG, "memo.ogg", "audio/ogg")
    await dfake.user_says(dfake.channel_id, "listen", mention_bot=True, files=[att])
    await dfake.wait_for(lambda: replies(dfake, "heard"), timeout=15)
    assert len(voice.requests) == 1
    assert SAID in user_messages(provider.calls[0].messages)[-1]


@pytest.mark.parametrize(("declared", "why"), [
    ({"size": 30 * 1024 * 1024}, "larger than the voice-note limit"),
    ({"duration_secs": 3600.0}, "longer than the voice-note limit"),
    ({"content_type": "application/x-msdownload"}, "not an audio file"),
])
async def test_an_oversized_or_non_audio_voice_message_is_refused_before_download(
        make_dstack, dfake, voice: FakeVoice, declared: dict, why: str) -> None:  # noqa: F811 (fixtures)
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[
        dbinding(dfake, require_mention=False, max_attachment_mb=50)])
    await stack.start()
    att = dfake.add_voice_message(OGG, **{"duration_secs": 2.0, **declared})
    await dfake.user_says(dfake.channel_id, "", files=[att])
    await dfake.wait_for(lambda: replies(dfake, why), timeout=15)
    [reply] = replies(dfake, why)
    assert reply.startswith("⚠️ I did not read")
    assert dfake.downloads == [] and voice.requests == []


async def test_a_voice_message_whose_bytes_are_not_audio_is_never_sent(
        make_dstack, dfake, voice: FakeVoice) -> None:  # noqa: F811 (fixtures)
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[dbinding(dfake, require_mention=False)])
    await stack.start()
    att = dfake.add_voice_message(b"MZ\x90\x00" + b"\x00" * 64, duration_secs=1.0)
    await dfake.user_says(dfake.channel_id, "", files=[att])
    await dfake.wait_for(lambda: replies(dfake, "could not transcribe"), timeout=15)
    assert "not an audio file" in replies(dfake, "could not transcribe")[0]
    assert voice.requests == []


async def test_a_voice_message_is_answered_with_a_spoken_reply_beside_the_text(
        make_dstack, dfake, home: Path, voice: FakeVoice) -> None:  # noqa: F811 (fixtures)
    with (home / "config.toml").open("a") as f:
        f.write('tts_model = "tts-1"\n')
    provider = ScriptedProvider(["Rolled back."], repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[
        dbinding(dfake, require_mention=False, voice_replies=True)])
    await stack.start()
    await dfake.user_says(dfake.channel_id, "", files=[dfake.add_voice_message(OGG,
                                                                               duration_secs=2)])
    await dfake.wait_for(lambda: dfake.uploads, timeout=15)
    [spoken] = dfake.uploads
    assert spoken.filename == "answer.ogg"
    assert spoken.data == FAKE_SPEECH + b"Rolled back."
    assert len(replies(dfake, "Rolled back.")) == 1
