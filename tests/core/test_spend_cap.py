"""The per-turn spend cap, configured by the operator, ends a turn with `cost_budget`."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.errors import ConfigError
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings


def _settings(tmp_path: Path, toml: str) -> tuple[object, object]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(toml)
    env = {"GEODE_HOME": str(home), "OPENAI_API_KEY": "sk-test-not-used-0123456789"}
    return load_settings(cwd=tmp_path, env=env)


async def test_cost_budget_stops_the_turn(tmp_path: Path) -> None:
    settings, secrets = _settings(
        tmp_path, '[loop]\ncost_budget_usd = 0.0001\n[model.prices]\nscripted = [100.0, 100.0]\n'
    )
    provider = ScriptedProvider([ToolCall("list_dir", {"path": "."})] * 5 + ["never"])
    async with Runtime(settings=settings, secrets=secrets) as rt:  # type: ignore[arg-type]
        session = await rt.open_session(
            SessionContext(mode="HEADLESS", workspace=tmp_path, provider=provider)
        )
        result = await session.run("spend")
    assert result.termination == "cost_budget"
    assert result.cost_usd >= 0.0001
    assert len(provider.calls) < 6


async def test_cost_budget_without_a_price_is_a_config_error(tmp_path: Path) -> None:
    settings, secrets = _settings(tmp_path, "[loop]\ncost_budget_usd = 1.0\n")
    async with Runtime(settings=settings, secrets=secrets) as rt:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"model\.prices"):
            await rt.open_session(
                SessionContext(mode="HEADLESS", workspace=tmp_path, model="gpt-6-sol")
            )
