"""``geode doctor``: every check says what it found and, when it fails, how to fix it.

A command in the advice is in backticks and runs as shown (no placeholders inside backticks; the
tests run each one)."""

from __future__ import annotations

import json as jsonlib
import shlex
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from geode.errors import GeodeError
from geode.settings import Secrets, Settings

if TYPE_CHECKING:
    from geode.providers.catalog import ModelRef

__all__ = ["run_doctor"]


@dataclass
class _Report:
    """What one doctor run found. ``--json`` prints it as one object instead of the lines:
    ``{"ok": bool, "checks": [{"name", "status": "ok"|"warn"|"fail", "message", "fix"}]}``."""

    json: bool = False
    #: the check group the next lines belong to (``config``, ``model``, ``store``, ...)
    group: str = ""
    checks: list[dict[str, str]] = field(default_factory=list)


_REPORT: ContextVar[_Report | None] = ContextVar("geode_doctor_report", default=None)


def _line(ok: bool | None, what: str, fix: str = "", *, name: str = "") -> None:
    status = {True: "ok", False: "fail", None: "warn"}[ok]
    report = _REPORT.get()
    if report is not None:
        report.checks.append({"name": name or report.group, "status": status, "message": what,
                              "fix": fix if ok is not True else ""})
        if report.json:
            return
    mark = {True: "ok  ", False: "FAIL", None: "warn"}[ok]
    typer.echo(f"[{mark}] {what}")
    if fix and ok is not True:
        typer.echo(f"       → {fix}")


def _note(text: str) -> None:
    """A line of information, no check (shown in the text report only)."""
    report = _REPORT.get()
    if report is None or not report.json:
        typer.echo(text)


def _group(name: str) -> None:
    report = _REPORT.get()
    if report is not None:
        report.group = name


async def run_doctor(cwd: Path, *, echo: Callable[[str], None] | None = None,
                     json: bool = False) -> bool:
    """Run every check and report it (lines, or one JSON object with ``json``); True when
    nothing failed. The start checks are ``geode serve``'s own
    (:func:`geode.cli.preflight.preflight`): a config serve refuses fails here too."""
    report = _Report(json=json)
    token = _REPORT.set(report)
    try:
        failures = await _run_checks(cwd)
    finally:
        _REPORT.reset(token)
    if json:
        typer.echo(jsonlib.dumps({"ok": failures == 0, "checks": report.checks},
                                 ensure_ascii=False))
    else:
        typer.echo("all checks passed" if failures == 0 else f"{failures} problem(s) found")
    return failures == 0


async def _run_checks(cwd: Path) -> int:
    from geode.cli.preflight import preflight
    from geode.logging import configure_logging
    from geode.settings import config_files, geode_home, load_settings

    configure_logging(level="WARNING")
    home = geode_home()
    files = config_files(home, cwd)
    _group("config")
    _line(True, f"GEODE_HOME = {home}")
    if files:
        _line(True, "config: " + ", ".join(str(f) for f in files))
    else:
        _line(
            None,
            "no config.toml found (defaults in use)",
            "run `geode init` (writes a commented config.toml and an empty .env)",
        )
    try:
        settings, secrets = load_settings(cwd=cwd)
    except GeodeError as exc:
        _line(False, f"config: {exc}")
        return 1
    failures = 0
    # exactly what `geode serve` checks before it starts, in its words
    try:
        checks = preflight(settings, secrets)
    except GeodeError as exc:  # a plugin that does not load: serve refuses to start too
        _line(False, str(exc), name="plugins")
        failures += 1
        checks = []
    for check in checks:
        ok = {"ok": True, "warn": None, "fail": False}[check.status]
        failures += check.status == "fail"
        _line(ok, check.message, check.fix, name=check.name)
    _group("model")
    failures += _check_model(settings, secrets)
    _group("store")
    failures += await _check_store(settings)
    _group("bindings")
    failures += await _plugin_checks(settings)
    _group("mcp")
    failures += await _check_mcp(settings, secrets, cwd)
    _group("sandbox")
    failures += await _check_sandbox()
    _group("computer_use")
    failures += await _check_computer_use(settings)
    _group("skills")
    failures += _check_skills_and_search(settings, secrets)
    _group("file_modes")
    _check_modes(settings)
    return failures


def _check_skills_and_search(settings: Settings, secrets: Secrets) -> int:
    """Every SKILL.md's front matter (a bad one fails, naming the file: it is not offered),
    a binding's or a named agent's ``skills`` naming none installed (warn), and the
    ``[search]`` backend's key."""
    from geode.search import load_backend
    from geode.skills import find_skills, skill_dirs

    failures = 0
    scan = find_skills(skill_dirs(settings))
    if scan.skills:
        _line(True, "skills: " + ", ".join(sorted(scan.skills)), name="skills")
    for problem in scan.problems:
        failures += 1
        _line(False, f"skill {problem.path}: {problem.problem}",
              "fix its front matter (name: the folder's name; description: what it does and "
              "when to use it); geode skills list shows every skill", name="skills")
    for b in settings.bindings:
        unknown = scan.unknown(b.skills or ())
        if unknown:
            _line(None, f"binding {b.platform} {b.channel}: skills {', '.join(unknown)} are not "
                  "installed", f"add them under {settings.home / 'skills'} or [skills] paths",
                  name="skills")
    for agent_name, agent in sorted(settings.agents.items()):  # one no binding uses too
        unknown = scan.unknown(agent.model_dump(include={"skills"}).get("skills") or ())
        if unknown:
            _line(None, f"[agents.{agent_name}]: skills {', '.join(unknown)} are not "
                  "installed", f"add them under {settings.home / 'skills'} or [skills] paths",
                  name="skills")
    provider = settings.search.provider
    spec = load_backend(provider) if provider else None
    if spec is not None:
        if spec.key_env and not secrets.get(spec.key_env):
            failures += 1
            _line(False, f"web search ({spec.name}): {spec.key_env} is not set",
                  f"set {spec.key_env} in the environment or {settings.home / '.env'}",
                  name="search")
        elif not (settings.search.base_url or spec.default_base_url):
            failures += 1
            _line(False, f"web search ({spec.name}) has no base_url",
                  "set [search] base_url to your instance's address", name="search")
        else:
            _line(True, f"web search: {spec.name}", name="search")
    return failures


def _check_model(settings: Settings, secrets: Secrets) -> int:
    from geode.providers.catalog import PROVIDERS, resolve_generation_model

    failures = 0
    on_codex = False
    try:
        ref = resolve_generation_model(settings.model.default)
        info = PROVIDERS[ref.provider]
        has_key = bool(info.key_env and secrets.get(info.key_env))
        _line(True, f"default model {settings.model.default} → provider {ref.provider}")
        on_codex = _default_path(settings, ref) == "codex_subscription"
        if on_codex:
            pass  # the Codex login is the credential; checked below
        elif info.key_env and not has_key:
            failures += 1
            _line(
                False,
                f"credential {info.key_env} is not set",
                f"export {info.key_env}=... or add it to {settings.home / '.env'}; "
                "or try the offline demo: `geode run --demo 'hello'`",
            )
        elif info.key_env:
            _line(True, f"credential {info.key_env} is set")
    except GeodeError as exc:
        failures += 1
        _line(False, f"default model: {exc}",
              "set [model] default in config.toml or GEODE_MODEL; `geode models` lists the ids")
    for name, info in sorted(PROVIDERS.items()):
        if info.key_env and name != "scripted":
            present = bool(secrets.get(info.key_env))
            _note(f"       {name:11} {info.key_env:20} {'set' if present else 'not set'}")
    return failures + _check_codex_login(settings, needed=on_codex)


def _default_path(settings: Settings, ref: ModelRef) -> str:
    from geode.providers.catalog import select_path

    return select_path(ref, settings.model.paths.get(ref.id) or settings.model.path)


def _check_codex_login(settings: Settings, *, needed: bool) -> int:
    """Report the Codex CLI login (the Codex-subscription path's credential); a failure only
    when the default model is configured on that path."""
    from geode.providers.codex_auth import LOGIN_COMMAND, CodexLogin, codex_auth_file

    status = CodexLogin(
        auth_file=codex_auth_file(settings.codex.home), token_url=settings.codex.token_url
    ).status()
    fix = f"run `{LOGIN_COMMAND}` (the official Codex CLI); GEODE reads {status.path}"
    if status.valid:
        _line(True, f"Codex login: {status.detail}")
        return 0
    what = f"Codex login: {status.detail if status.present else f'none at {status.path}'}"
    if not needed:  # only the codex path needs it: information, not a problem
        _note(f"       {what} (needed only on the codex path)")
        return 0
    _line(False, what, fix)
    return 1


async def _check_store(settings: Settings) -> int:
    try:
        from geode.store import open_store

        settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        store = await open_store(settings.store_url)
        try:
            reachable = await store.ping()
        finally:
            await store.aclose()
    except GeodeError as exc:
        _line(False, f"store: {exc}", "check [store] url; run `geode db upgrade`")
        return 1
    _line(
        reachable,
        f"store reachable: {_safe_url(settings.store_url)}",
        "check [store] url; run `geode db upgrade`",
    )
    return 0 if reachable else 1


async def _plugin_checks(settings: Settings) -> int:
    """Each plugin's doctor checks (the chat layer's: per binding, what runs freely, what
    needs an approver's yes, and who can give it); the number that failed."""
    from geode.plugins import load_part, plugins

    try:
        loaded = plugins()
    except GeodeError:  # said with the start checks above
        return 0
    failures = 0
    for plugin in loaded:
        if plugin.doctor:
            for check in await load_part(plugin.doctor)(settings):
                failures += check.status == "fail"
                ok = {"ok": True, "warn": None, "fail": False}[check.status]
                _line(ok, check.message, check.fix, name=check.name)
    return failures


async def _check_mcp(settings: Settings, secrets: Secrets, cwd: Path) -> int:
    from geode.mcp import MCPServerManager
    from geode.mcp.trust import project_mcp_section, untrusted_project_servers

    failures = 0
    if settings.mcp or project_mcp_section(cwd) is not None:
        manager = MCPServerManager.from_settings(settings, secrets, project_dir=cwd)
        failed = await manager.probe()
        for name, why in sorted(failed.items()):
            failures += 1
            _line(False, why, f"fix or remove [mcp.servers.{name}]; `geode mcp list` shows state")
        started = sorted(set(manager.status()) - set(failed))
        if started:
            _line(True, "MCP servers started: " + ", ".join(started))
    for name in untrusted_project_servers(cwd, settings.home):
        _line(
            None,
            f"project MCP server {name!r} is not trusted and will not run",
            f"review {cwd / '.geode' / 'config.toml'}, "
            f"then run `geode trust {shlex.quote(str(cwd))}`",
        )
    return failures


async def _check_computer_use(settings: Settings) -> int:
    """With a binding that enables computer use, the display and the X tools must work: the
    configured display (``[computer] display`` / ``$DISPLAY``) must answer; without one,
    ``geode serve`` starts its own Xvfb, so this starts one the same way and stops it."""
    enabled = [b for b in settings.bindings if b.computer_use is True]
    if not enabled:
        return 0
    from geode.daemon.display import XvfbError, XvfbSupervisor
    from geode.tools.builtin.desktop import display_check

    names = ", ".join(f"{b.platform} {b.channel}" for b in enabled)
    display = settings.computer.display
    if display and display != "xvfb":
        ok, what = await display_check(display)
        _line(ok, f"computer use ({names}): {what}",
              "start that X server, or unset [computer] display / $DISPLAY so geode serve "
              "starts its own Xvfb; install xdotool and imagemagick")
        return 0 if ok else 1
    xvfb = XvfbSupervisor(screen=settings.computer.screen)
    try:
        started = await xvfb.start()
    except XvfbError as exc:
        _line(False, f"computer use ({names}): no display configured and {exc}",
              "apt-get install xvfb, or set [computer] display to a running X display")
        return 1
    try:
        ok, what = await display_check(started)
    finally:
        await xvfb.stop()
    _line(ok, f"computer use ({names}): no display configured: geode serve starts its own "
              f"Xvfb (tried: {what})",
          "install xdotool and imagemagick")
    return 0 if ok else 1


def _safe_url(url: str) -> str:
    from geode.store.url import hide_password

    try:
        return hide_password(url)
    except Exception:
        return url.split("@")[-1]


async def _check_sandbox() -> int:
    """Whether run_bash's bubblewrap sandbox works here, and if not why and how to fix it."""
    import asyncio
    import shutil

    from geode.tools.builtin._sandbox import diagnose, missing_features, probe

    reason = await asyncio.to_thread(probe)
    if reason is None:
        _line(True, "sandbox: bubblewrap works here (run_bash available)")
        bwrap = shutil.which("bwrap")
        missing = await asyncio.to_thread(missing_features, bwrap) if bwrap else []
        if missing:
            _line(
                None,
                "sandbox: this bubblewrap cannot enforce " + "; ".join(missing),
                "install bubblewrap 0.8 or later",
            )
        return 0
    _line(False, f"sandbox: run_bash will refuse to run: {reason}", diagnose(reason))
    return 1


def _check_modes(settings: Settings) -> None:
    """Warn about GEODE's files readable by other local users (they hold secrets and
    conversation text). Warnings only: the operator may share a group on purpose."""
    import stat

    home = settings.home
    paths = [(home, 0o700), (home / ".env", 0o600), (home / "config.toml", 0o600)]
    url = settings.store_url
    if url.startswith("sqlite"):
        from geode.store.url import parse_url

        db = parse_url(url).database
        if db:
            paths += [(Path(db + s), 0o600) for s in ("", "-wal", "-shm")]
    for path, want in paths:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if mode & 0o077:
            _line(
                None,
                f"{path} is mode {mode:04o}: other local users can read it",
                f"chmod {want:o} {path}",
            )
