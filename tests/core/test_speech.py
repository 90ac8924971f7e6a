"""Spoken replies' client (geode.voice.Speaker) against the loopback fake: no speaker without
``[voice] tts_model``; what is sent (model, voice, Ogg/Opus, the text cut at a sentence end);
a failure or an answer that is not Ogg audio is a SpeechError, never bytes to post."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.settings import load_settings
from geode.testing.fake_voice import FAKE_SPEECH, FakeVoice
from geode.voice import SpeechError, speech_text, voice_speaker


def _settings(tmp_path: Path, config: str):  # type: ignore[no-untyped-def]
    (tmp_path / "config.toml").write_text(config)
    return load_settings(cwd=tmp_path, env={"GEODE_HOME": str(tmp_path),
                                            "OPENAI_API_KEY": "sk-speech"})


def test_without_a_tts_model_there_is_no_speaker(tmp_path: Path) -> None:
    settings, secrets = _settings(tmp_path, '[voice]\nmodel = "whisper-1"\n')
    assert voice_speaker(settings.voice, secrets) is None


def test_a_long_answer_is_cut_at_a_sentence_end() -> None:
    text = "First point here. Second point follows. " * 10
    said = speech_text(text, 60)
    assert said == "First point here. Second point follows. First point here. …"
    assert speech_text("  short\n answer ", 60) == "short answer"
    assert speech_text("x" * 100, 50) == "x" * 50 + " …"


async def test_the_speaker_sends_the_text_and_returns_ogg_audio(tmp_path: Path) -> None:
    async with FakeVoice() as fake:
        settings, secrets = _settings(
            tmp_path, f'[voice]\ntts_model = "tts-1"\nvoice = "nova"\n'
                      f'base_url = "{fake.base_url}"\nmax_speech_chars = 60\n')
        speaker = voice_speaker(settings.voice, secrets)
        assert speaker is not None
        audio = await speaker.speak("Done. " * 30)
        [call] = fake.speech_requests
        assert (call.model, call.voice, call.response_format, call.key) == (
            "tts-1", "nova", "opus", "sk-speech")
        assert len(call.input) <= 62 and call.input.endswith(". …")
        assert audio == FAKE_SPEECH + call.input.encode()
        await speaker.aclose()


@pytest.mark.parametrize(("status", "body", "why"), [
    (500, None, "HTTP 500"), (None, b"<html>oops</html>", "did not return Ogg/Opus"),
])
async def test_a_failure_or_an_answer_that_is_not_audio_is_a_speech_error(
        tmp_path: Path, status: int | None, body: bytes | None, why: str) -> None:
    async with FakeVoice() as fake:
        fake.speech_status, fake.speech_body = status, body
        settings, secrets = _settings(
            tmp_path, f'[voice]\ntts_model = "tts-1"\nbase_url = "{fake.base_url}"\n')
        speaker = voice_speaker(settings.voice, secrets)
        assert speaker is not None
        with pytest.raises(SpeechError, match=why):
            await speaker.speak("hello")
        with pytest.raises(SpeechError, match="no text"):
            await speaker.speak("   ")
        await speaker.aclose()
