"""Issue #16, classes 3, 6, 10, 11, 12: an untrusted project file sets only user-facing keys
and no test hook; GEODE's files are private; every output path of `geode run` is redacted,
zero-width characters included; a cut web page says it was cut."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from geode.errors import ConfigError
from geode.secret_redaction import MASK, redact_text, register_secret
from geode.settings import Settings, load_settings
from geode.testing.loopback import serve_app
from geode.tools.builtin import web_fetch
from tests.security.conftest import make_ctx

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------- 3: project config


def _project(tmp_path: Path, text: str) -> tuple[Path, Path]:
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    (proj / ".geode").mkdir(parents=True)
    (proj / ".geode" / "config.toml").write_text(text)
    return home, proj


@pytest.mark.parametrize(
    ("text", "named"),
    [
        # refused as an unknown key now (no such setting exists any more)
        ('test_pause_at = "turn_start"\ntest_pause_marker = "/etc/hostname"\n',
         ".*test_pause_at"),
        ("log_level = 'DEBUG'\n", "log_level"),
        ("[sandbox]\nmax_processes = 100000\n", "sandbox"),
        ("[model]\ndefault = 'x'\nprices = {x = [0, 0]}\n", "model.prices"),
        ("[loop]\ncost_budget_usd = 1e9\n", "loop.cost_budget_usd"),
        ("health_port = 1\n", "health_port"),
    ],
)
def test_project_file_may_set_only_the_allow_list(tmp_path: Path, text: str, named: str) -> None:
    home, proj = _project(tmp_path, text)
    pattern = named if named.startswith(".*") else f"may not set {named}"
    with pytest.raises(ConfigError, match=pattern):
        load_settings(cwd=proj, env={"GEODE_HOME": str(home)})


def test_project_file_user_keys_still_apply(tmp_path: Path) -> None:
    home, proj = _project(
        tmp_path,
        "[model]\ndefault = 'glm-5.3'\n[loop]\nmax_rounds = 7\n"
        '[mcp.servers.x]\ncommand = "srv"\n',
    )
    s, _ = load_settings(cwd=proj, env={"GEODE_HOME": str(home)})
    assert (s.model.default, s.loop.max_rounds, s.mcp) == ("glm-5.3", 7, {})


def test_no_test_hook_is_reachable_from_config_or_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('test_pause_at = "turn_start"\n')
    with pytest.raises(ConfigError, match="test_pause_at"):  # not a setting (any more)
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    (home / "config.toml").write_text("")
    s, _ = load_settings(
        cwd=tmp_path,
        env={"GEODE_HOME": str(home), "GEODE_TEST_PAUSE_AT": "turn_start",
             "GEODE_TEST_PAUSE_MARKER": str(tmp_path / "m")},
    )
    assert not any("pause" in name for name in Settings.model_fields)
    assert not any("pause" in name for name in s.model_dump())


# ----------------------------------------------------------------- 6: file modes


async def test_home_store_and_ledger_are_private(tmp_path: Path) -> None:
    from geode.daemon.runtime import Runtime
    from geode.providers.scripted import ScriptedProvider

    home = tmp_path / "home"
    old = os.umask(0o022)
    try:
        settings, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
        runtime = await Runtime.create(settings=settings, secrets=secrets)
    finally:
        os.umask(old)
    async with runtime:
        from geode.daemon.session import SessionContext

        ctx = SessionContext(mode="HEADLESS", workspace=tmp_path,
                             provider=ScriptedProvider(["hi"]))
        session = await runtime.open_session(ctx)
        await session.run("hello")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    made = [p for p in home.rglob("*") if p.is_file() and p.name.startswith("geode.db")]
    assert made, list(home.rglob("*"))
    for p in made + [p for p in (home / "ledger").rglob("*") if p.is_file()]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    # the tools get GEODE's own files as protected paths
    protected = runtime.tools.deps().protected_paths
    assert home in protected and home / "geode.db" in protected


async def test_doctor_warns_about_loose_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from geode.cli import doctor

    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    (home / ".env").write_text("X_API_KEY=abcdefgh\n")
    (home / ".env").chmod(0o644)
    settings, _ = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    doctor._check_modes(settings)
    out = capsys.readouterr().out
    assert f"{home / '.env'} is mode 0644" in out and f"chmod 600 {home / '.env'}" in out
    assert f"{home} is mode 0755" in out and f"chmod 700 {home}" in out


# ----------------------------------------------------------------- 10, 11: redaction


def test_a_secret_split_by_zero_width_characters_is_masked() -> None:
    register_secret("plantedLiteralSecret-77f3a9")
    for zw in ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"):
        literal = "plantedLiteral" + zw + "Secret-77f3a9"
        shaped = "sk-ant-api03-" + zw.join("abcdefghij0123456789")
        text = f"a {literal} b {shaped} c"
        assert redact_text(text) == f"a {MASK} b {MASK} c", repr(zw)
    # ordinary uses of those characters are left alone (emoji ZWJ sequences)
    assert redact_text("family \U0001f468\u200d\U0001f469") == "family \U0001f468\u200d\U0001f469"


async def test_geode_run_output_is_redacted_on_every_path(tmp_path: Path) -> None:
    from geode.testing.fake_anthropic import FakeAnthropicServer

    key = "sk-ant-api03-runredact0123456789abcdefghij"
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "ANTHROPIC_"))}
    env.update(PYTHONPATH=str(REPO), GEODE_HOME=str(home), ANTHROPIC_API_KEY=key)
    async with FakeAnthropicServer() as srv:
        env["ANTHROPIC_BASE_URL"] = srv.base_url
        for args in (["--json"], [], ["--stream"]):
            # the model echoes the key, once whole and once split by a zero-width space
            srv.enqueue_text(f"your key is {key} or {key[:10]}\u200b{key[10:]}")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "geode", "run", *args, "say the key",
                cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            text = out.decode() + err.decode()
            assert proc.returncode == 0, text
            assert key[12:] not in text.replace("\u200b", ""), (args, text)
            assert MASK in text, (args, text)
            if args == ["--json"]:
                assert MASK in json.loads(out)["text"]


# ----------------------------------------------------------------- 12: web_fetch cut marker


@pytest.fixture
async def chunked() -> AsyncIterator[int]:
    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await resp.write(b"a" * 1000)  # exactly the cap, in its own chunk
        await asyncio.sleep(0.2)
        if request.path == "/more":
            await resp.write(b"b" * 500)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serve_app(app) as port:
        yield port


async def test_a_body_cut_exactly_at_the_cap_says_so(tmp_path: Path, chunked: int) -> None:
    ctx = make_ctx(
        tmp_path, allow_private_hosts=[f"127.0.0.1:{chunked}"], web_fetch_max_bytes=1000
    )
    cut = await web_fetch.handler(ctx, url=f"http://127.0.0.1:{chunked}/more")
    assert "[body cut at 1000 bytes]" in str(cut)
    assert "b" not in str(cut).split("\n\n", 1)[1]
    whole = await web_fetch.handler(ctx, url=f"http://127.0.0.1:{chunked}/exact")
    assert "[body cut" not in str(whole)  # exactly the cap and no more: the whole page
