"""Audio clips on Slack (the Slack fake, the real OpenAI SDK against the transcription fake):
with ``[voice]`` configured a clip is checked against the voice limits on what its file
object declares before any download, saved, transcribed, given to the model as a marked
transcript and shown in the thread ("🎙 …") before the answer. An oversized clip or a
"clip" that is not audio never reaches the endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_helpers import ALICE, CH, bot_messages, make, mention, slack_binding

from geode.providers.scripted import ScriptedProvider
from geode.testing.fake_voice import FAKE_SPEECH, FakeVoice
from tests.bots.conftest import user_messages

#: the first bytes of a WebM file, as Slack records its clips
WEBM = b"\x1a\x45\xdf\xa3" + b"\x00" * 200
SAID = "ship the release on friday"


@pytest.fixture
async def voice(home: Path) -> AsyncIterator[FakeVoice]:
    async with FakeVoice(text=SAID) as v:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[voice]\nmodel = "whisper-1"\nbase_url = "{v.base_url}"\nmax_duration_s = 120\n')
        yield v


def replies(fake, needle: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [m["text"] for m in bot_messages(fake, CH) if needle in m["text"]]


async def test_an_audio_clip_is_transcribed_and_shown_before_the_answer(
        stacks, home, fake, voice: FakeVoice) -> None:
    provider = ScriptedProvider(["noted"], repeat_last=True)
    stack = make(stacks, home, fake, provider=provider)
    await stack.start()
    clip = fake.add_audio_clip(WEBM, duration_ms=4200)
    await fake.user_posts(CH, mention(""), user=ALICE,
                          extra={"files": [clip], "subtype": "file_share"})
    await fake.wait_until(lambda: replies(fake, "noted"), within=15)
    [call] = voice.requests
    assert call.data == WEBM and call.filename.endswith(".webm")
    prompt = user_messages(provider.calls[0].messages)[-1]
    assert SAID in prompt and "automatic transcript" in prompt
    [reply] = replies(fake, "noted")
    assert reply.index(f"🎙 {SAID}") < reply.index("noted")
    assert fake.downloads == [clip["id"]]


@pytest.mark.parametrize(("clip", "why"), [
    ({"size": 30 * 1024 * 1024}, "larger than the voice-note limit"),
    ({"duration_ms": 3_600_000}, "longer than the voice-note limit"),
    ({"mimetype": "application/x-msdownload"}, "not an audio file"),
])
async def test_an_oversized_or_non_audio_clip_is_refused_before_download(
        stacks, home, fake, voice: FakeVoice, clip: dict, why: str) -> None:
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make(stacks, home, fake, provider=provider,
                 bindings=[slack_binding(max_attachment_mb=50)])
    await stack.start()
    f = fake.add_audio_clip(WEBM, **{"duration_ms": 3000, **clip})
    await fake.user_posts(CH, mention("listen"), user=ALICE,
                          extra={"files": [f], "subtype": "file_share"})
    await fake.wait_until(lambda: replies(fake, why), within=15)
    [reply] = replies(fake, why)
    assert reply.startswith("⚠️ I did not read")
    assert fake.downloads == [] and voice.requests == []


async def test_a_clip_whose_bytes_are_not_audio_is_never_sent(
        stacks, home, fake, voice: FakeVoice) -> None:
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make(stacks, home, fake, provider=provider)
    await stack.start()
    f = fake.add_audio_clip(b"MZ\x90\x00" + b"\x00" * 64, duration_ms=2000)
    await fake.user_posts(CH, mention("listen"), user=ALICE,
                          extra={"files": [f], "subtype": "file_share"})
    await fake.wait_until(lambda: replies(fake, "could not transcribe"), within=15)
    assert "not an audio file" in replies(fake, "could not transcribe")[0]
    assert voice.requests == []


async def test_a_clip_is_answered_with_a_spoken_reply_beside_the_text(
        stacks, home, fake, voice: FakeVoice) -> None:
    with (home / "config.toml").open("a") as f:
        f.write('tts_model = "tts-1"\n')
    provider = ScriptedProvider(["Friday it is."], repeat_last=True)
    stack = make(stacks, home, fake, provider=provider,
                 bindings=[slack_binding(voice_replies=True)])
    await stack.start()
    clip = fake.add_audio_clip(WEBM, duration_ms=4200)
    ts = await fake.user_posts(CH, mention(""), user=ALICE,
                               extra={"files": [clip], "subtype": "file_share"})
    await fake.wait_until(lambda: fake.uploads, within=15)
    [spoken] = fake.uploads
    assert spoken.filename == "answer.ogg" and spoken.thread_ts == ts
    assert spoken.data == FAKE_SPEECH + b"Friday it is."
    assert [c.input for c in voice.speech_requests] == ["Friday it is."]
    assert len(replies(fake, "Friday it is.")) == 1
