"""Issue #30 finding 4: a typo in config.toml never disables something silently.

``[channels.telegarm]`` used to start serve with no connector, ``base_ur = …`` and
``rate_overal_per_s = …`` in ``[channels.telegram]`` were ignored; each is now exit 2 with
the close match, worded as every other unknown name of config.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from bots.options import LayerOptions
from bots.platforms import channel_options, platform_specs
from geode.errors import ConfigError
from geode.settings import load_settings, platform_names
from tests.cli.test_run_command import _env, geode

REPO = Path(__file__).resolve().parents[2]
#: no connection may leave the host: a connector that started anyway polls a closed port
LOOPBACK = "http://127.0.0.1:9"


def _home(tmp_path: Path, config: str) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(config)
    return home


async def _serve(home: Path, tmp_path: Path) -> tuple[int, str]:
    """``geode serve`` with a bot token set; a config it accepts would keep it running, and
    the helper's 60 s bound fails the test instead."""
    env = _env(home, TELEGRAM_BOT_TOKEN="123:abc", SLACK_BOT_TOKEN="xoxb-1",
               DISCORD_BOT_TOKEN="d.1", GEODE_HEALTH_PORT="0")
    code, _out, err = await geode("serve", "--demo", env=env, cwd=tmp_path)
    return code, err


async def test_a_misspelt_platform_section_is_exit_2_naming_the_platform(
        tmp_path: Path) -> None:
    home = _home(tmp_path, f'[channels.telegarm]\nbase_url = "{LOOPBACK}/bot"\n')
    code, err = await _serve(home, tmp_path)
    assert code == 2, err
    assert "[channels.telegarm]: unknown platform 'telegarm'. Did you mean telegram?" in err
    assert "Traceback" not in err


def test_a_misspelt_binding_platform_names_the_close_match(tmp_path: Path) -> None:
    home = _home(tmp_path, '[[bindings]]\nplatform = "telegrm"\nchannel = "1"\n')
    with pytest.raises(ConfigError) as bad:
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    assert ("[[bindings]] platform: unknown platform 'telegrm'. Did you mean telegram?"
            in str(bad.value))


@pytest.mark.parametrize(("line", "close"), [
    ('base_ur = "http://127.0.0.1:9/bot"', "base_url"),
    ("rate_overal_per_s = 5", "rate_overall_per_s"),
])
async def test_a_misspelt_channel_key_is_exit_2_with_the_close_match(
        tmp_path: Path, line: str, close: str) -> None:
    home = _home(tmp_path, f'[channels.telegram]\nbase_url = "{LOOPBACK}/bot"\n'
                           f'base_file_url = "{LOOPBACK}/file/bot"\n{line}\n')
    code, err = await _serve(home, tmp_path)
    assert code == 2, err
    key = line.split(" ")[0]
    assert f"[channels.telegram]: unknown key '{key}'. Did you mean {close}?" in err


def test_an_unknown_key_in_any_section_names_its_close_match(tmp_path: Path) -> None:
    home = _home(tmp_path, '[model]\ndefualt = "gpt-6-sol"\n\n[[bindings]]\nplatform = '
                           '"telegram"\nchannel = "1"\nallow_user = ["42"]\n')
    with pytest.raises(ConfigError) as err:
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    text = str(err.value)
    assert "[model]: unknown key 'defualt'. Did you mean default?" in text
    assert "[bindings #1]: unknown key 'allow_user'. Did you mean allow_users?" in text
    assert "Extra inputs are not permitted" not in text  # pydantic's words, without a hint


def test_every_registered_platform_forbids_unknown_options() -> None:
    assert sorted(platform_specs()) == sorted(platform_names())
    for name, spec in platform_specs().items():
        assert issubclass(spec.options, LayerOptions)
        assert channel_options(name, {}).enabled is True
        with pytest.raises(ConfigError, match=r"unknown key 'enabeld'\. Did you mean enabled\?"):
            channel_options(name, {"enabeld": False})
        for token in spec.tokens:  # each secret is named by an option of the model
            assert token.option in spec.options.model_fields


@pytest.mark.parametrize("example", ["config/config.example.toml",
                                     "geode/cli/config.example.toml"])
def test_the_examples_channel_sections_are_valid_when_uncommented(example: str) -> None:
    text = (REPO / example).read_text()
    # the commented [channels.*] blocks, uncommented as an operator would
    blocks = re.findall(r"^# (\[channels\.\w+\]\n(?:# [a-z_]+ = .*\n)+)", text, re.M)
    assert len(blocks) == len(platform_specs())
    for block in blocks:
        data = tomllib.loads(re.sub(r"^# ", "", block, flags=re.M))
        for name, raw in data["channels"].items():
            channel_options(name, raw)
