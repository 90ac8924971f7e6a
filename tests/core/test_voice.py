"""``[voice]`` and the transcription client (geode.voice) against the loopback fake: the
settings (unknown keys refused with the close match), what counts as audio, and what the
endpoint is sent or not sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.errors import ConfigError
from geode.settings import load_settings
from geode.testing.fake_voice import FakeVoice
from geode.voice import TranscriptionError, audio_suffix, voice_transcriber


def _settings(tmp_path: Path, config: str, **env: str):  # type: ignore[no-untyped-def]
    (tmp_path / "config.toml").write_text(config)
    return load_settings(cwd=tmp_path, env={"GEODE_HOME": str(tmp_path), **env})


def test_an_unknown_voice_key_names_its_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad:
        _settings(tmp_path, '[voice]\nmdoel = "whisper-1"\n')
    assert "[voice]: unknown key 'mdoel'. Did you mean model?" in str(bad.value)


def test_without_a_model_there_is_no_transcriber(tmp_path: Path) -> None:
    settings, secrets = _settings(tmp_path, '[voice]\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert voice_transcriber(settings.voice, secrets) is None


@pytest.mark.parametrize(("head", "suffix"), [
    (b"OggS\x00\x02", ".ogg"), (b"ID3\x04", ".mp3"), (b"\xff\xfb\x90", ".mp3"),
    (b"\xff\xf1\x50", ".mp3"), (b"RIFF\x24\x00\x00\x00WAVEfmt ", ".wav"),
    (b"fLaC\x00", ".flac"), (b"\x00\x00\x00\x20ftypM4A ", ".m4a"),
    (b"\x1a\x45\xdf\xa3\x01", ".webm"),
    (b"MZ\x90\x00", None), (b"%PDF-1.4", None), (b"#!/bin/sh\n", None), (b"", None),
    (b"\x7fELF", None),
])
def test_audio_is_told_by_its_first_bytes(head: bytes, suffix: str | None) -> None:
    assert audio_suffix(head) == suffix


async def test_the_endpoint_gets_the_audio_and_the_model_and_its_text_comes_back(
        tmp_path: Path) -> None:
    async with FakeVoice(text="  the meeting moved to four  ") as fake:
        settings, secrets = _settings(
            tmp_path, f'[voice]\nmodel = "whisper-1"\nbase_url = "{fake.base_url}"\n',
            OPENAI_API_KEY="sk-v")
        t = voice_transcriber(settings.voice, secrets)
        assert t is not None
        try:
            assert await t.transcribe(b"OggS" + b"\x00" * 40, name="voice") == (
                "the meeting moved to four")
            with pytest.raises(TranscriptionError, match="not an audio file"):
                await t.transcribe(b"MZ" + b"\x00" * 40, name="voice.ogg")
            fake.status = 429
            with pytest.raises(TranscriptionError, match="HTTP 429") as failed:
                await t.transcribe(b"OggS" + b"\x00" * 40, name="voice")
            assert failed.value.status == 429
        finally:
            await t.aclose()
        first = fake.requests[0]
        assert (first.model, first.filename, first.key) == ("whisper-1", "voice.ogg", "sk-v")
        # the non-audio bytes were never sent: only the good call and the 429's (retried)
        assert all(r.data.startswith(b"OggS") for r in fake.requests)


async def test_an_unreachable_endpoint_is_a_transcription_error(tmp_path: Path) -> None:
    settings, secrets = _settings(
        tmp_path, '[voice]\nmodel = "whisper-1"\nbase_url = "http://127.0.0.1:9/v1"\n'
                  'timeout_s = 2\n')
    t = voice_transcriber(settings.voice, secrets)
    assert t is not None
    try:
        with pytest.raises(TranscriptionError, match="could not be reached"):
            await t.transcribe(b"OggS" + b"\x00" * 40, name="voice")
    finally:
        await t.aclose()
